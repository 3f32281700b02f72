"""T5 text-to-text formats (finetune.md §4; T5 paper §2.4 and Appendix D, ``t5.data.preprocessors
.glue``) and the way back from a decoded string to a label (``t5.data.postprocessors``).

Input: the task name, then each field as ``name: value``, joined by single spaces (MNLI puts the
hypothesis first). Target: the class's word, or for regression the score rounded to the nearest
0.2 and written as ``"%.1f"``. Decoded strings that are no label become class −1
(``string_label_to_class_id``) or −1.0 (``string_to_float``) and are counted as invalid.
"""

from __future__ import annotations

import numpy as np

from c4forge.glue.tasks import Example, TaskSpec

INVALID_CLASS = -1
INVALID_SCORE = -1.0


def t5_input(spec: TaskSpec, ex: Example) -> str:
    values = [ex.text_a] if ex.text_b is None else [ex.text_a, ex.text_b]
    order = spec.t5_order or tuple(range(len(values)))
    parts = [spec.name] + [f"{spec.field_names[i]}: {values[i]}" for i in order]
    return " ".join(parts)


def regression_target(score: float) -> str:
    """STS-B's target string: round(score·5)/5 as "%.1f" (numpy's round half to even, as tf.round)."""
    return "%.1f" % (np.round(score * 5.0) / 5.0)


def t5_target(spec: TaskSpec, label: int | float) -> str:
    if spec.regression:
        return regression_target(float(label))
    return spec.target_words[int(label)]


def parse_prediction(spec: TaskSpec, text: str) -> tuple[int | float, bool]:
    """(label, valid) of a decoded string; invalid strings give −1 / −1.0 (counted as wrong)."""
    text = text.strip()
    if spec.regression:
        try:
            value = float(text)
        except ValueError:
            return INVALID_SCORE, False
        if not np.isfinite(value):
            return INVALID_SCORE, False
        return value, True
    if text in spec.target_words:
        return spec.target_words.index(text), True
    return INVALID_CLASS, False
