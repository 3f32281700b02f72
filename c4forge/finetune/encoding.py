"""Token ids for fine-tuning (finetune.md §4–§5), with every truncation counted.

* text head (T5): ids of the text-to-text input string, cut to ``max_length − 1``, then EOS
  (seqio's "trim, then append EOS"); targets = ids of the target word + EOS.
* encoder heads on BERT: ``[CLS] A [SEP] (B [SEP])`` with segment ids 0/1; a pair too long loses
  tokens from the end of the longer side first (BERT's ``_truncate_seq_pair``).
* encoder heads on a T5 encoder: the text-to-text input string + EOS (T5 has no ``[CLS]``).

``max_length`` is capped by the model's positions (BERT's ``max_position``); examples that had to
be cut are counted in ``truncated`` and reported, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from c4forge.finetune.head_registry import get_head
from c4forge.glue.formats import t5_input, t5_target
from c4forge.glue.tasks import Example, TaskSpec
from c4forge.trainers.models import get_family


@dataclass
class Encoded:
    inputs: list[list[int]]
    segments: list[list[int]] | None  # BERT token types; None for T5
    targets: list[list[int]] | None  # text head only
    labels: np.ndarray  # int64 classes or float64 scores
    truncated: int  # examples whose input was cut to max_length


def bert_specials(vocab) -> tuple[int, int]:
    """(``[CLS]``, ``[SEP]``) = (V − 2, V − 3), objectives.md §4.1."""
    return vocab.vocab_size - 2, vocab.vocab_size - 3


def truncate_seq_pair(a: list[int], b: list[int], max_total: int) -> bool:
    """BERT's ``_truncate_seq_pair``: pop from the end of the longer list; True if anything went."""
    cut = False
    while len(a) + len(b) > max_total:
        (a if len(a) > len(b) else b).pop()
        cut = True
    return cut


def encode_examples(
    spec: TaskSpec,
    examples: list[Example],
    vocab,
    head: str,
    family: str,
    max_length: int,
) -> Encoded:
    labels = np.asarray(
        [ex.label for ex in examples], dtype=np.float64 if spec.regression else np.int64
    )
    eos = vocab.eos_id
    if get_family(family).cls_inputs:
        cls_id, sep_id = bert_specials(vocab)
        texts_a = vocab.encode_batch([ex.text_a for ex in examples])
        texts_b = vocab.encode_batch([ex.text_b or "" for ex in examples])
        inputs, segments, truncated = [], [], 0
        for ex, a, b in zip(examples, texts_a, texts_b):
            a, b = list(a), list(b) if ex.text_b is not None else []
            budget = max_length - (3 if ex.text_b is not None else 2)
            truncated += truncate_seq_pair(a, b, budget)
            ids = [cls_id, *a, sep_id]
            seg = [0] * len(ids)
            if ex.text_b is not None:
                ids += [*b, sep_id]
                seg += [1] * (len(b) + 1)
            inputs.append(ids)
            segments.append(seg)
        return Encoded(inputs, segments, None, labels, truncated)
    encoded = vocab.encode_batch([t5_input(spec, ex) for ex in examples])
    truncated = sum(len(ids) > max_length - 1 for ids in encoded)
    inputs = [list(ids[: max_length - 1]) + [eos] for ids in encoded]
    targets = None
    if get_head(head).generates:
        words = vocab.encode_batch([t5_target(spec, ex.label) for ex in examples])
        targets = [list(ids) + [eos] for ids in words]
    return Encoded(inputs, None, targets, labels, truncated)


def _pad(rows: list[list[int]], length: int) -> torch.Tensor:
    out = np.zeros((len(rows), length), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return torch.from_numpy(out)


def collate(enc: Encoded, idx: np.ndarray, pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """A batch of rows ``idx``: padded to the longest row (or to ``pad_to`` for static shapes)."""
    rows = [enc.inputs[i] for i in idx]
    length = pad_to or max(len(r) for r in rows)
    batch = {"input_ids": _pad(rows, length)}
    batch["attention_mask"] = (batch["input_ids"] != 0).long()
    if enc.segments is not None:
        batch["token_type_ids"] = _pad([enc.segments[i] for i in idx], length)
        # BERT's [CLS]/[SEP] are never 0, but a pad id 0 inside text cannot occur either:
        batch["attention_mask"] = _pad([[1] * len(enc.inputs[i]) for i in idx], length)
    if enc.targets is not None:
        tgt = [enc.targets[i] for i in idx]
        batch["targets"] = _pad(tgt, max(len(t) for t in tgt))
    batch["labels"] = torch.from_numpy(enc.labels[idx])
    return batch
