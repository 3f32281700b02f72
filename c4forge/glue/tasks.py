"""The GLUE tasks (finetune.md §3) and ``--task custom``: where each file is, which columns hold
the text and the label, the label set, and loaders that refuse malformed rows by file and line.

GLUE's TSVs are written without quoting, so they are read with ``csv.QUOTE_NONE`` (several rows
hold unbalanced double quotes); files are opened as ``utf-8-sig`` because MRPC starts with a byte
order mark. A row with fewer or more fields than the header (a missing column, an extra tab), a
label outside the task's set, an empty file: each is a one-line ``InputError`` naming file and line.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from c4forge.errors import ConfigError, InputError


@dataclass(frozen=True)
class Example:
    """One row: its 0-based index in the file, the 1-based line it came from, text(s), label.

    ``label`` is a class index into ``TaskSpec.labels`` or a float (regression)."""

    index: int
    line: int
    text_a: str
    text_b: str | None
    label: int | float


@dataclass(frozen=True)
class TaskSpec:
    name: str
    folder: str  # GLUE distribution folder
    columns: tuple[str, ...]  # text columns (header names, or positions for CoLA)
    field_names: tuple[str, ...]  # the T5 names of those columns, same order
    label_column: str
    labels: tuple[str, ...] | None  # strings in the file, by class index; None = regression
    target_words: tuple[str, ...] | None  # T5 target word per class index
    metrics: tuple[str, ...]
    dev_splits: tuple[str, ...] = ("dev",)
    header: bool = True
    t5_order: tuple[int, ...] | None = None  # order of the fields in the T5 input (MNLI)
    positions: dict[str, int] = field(default_factory=dict)  # header-less files: column positions

    @property
    def regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def pair(self) -> bool:
        return len(self.columns) == 2


# Target words and class order follow t5.data.glue_utils.get_glue_text_preprocessor /
# tfds glue label_classes; BERT's run_classifier uses the same class order.
GLUE_TASKS: dict[str, TaskSpec] = {
    "cola": TaskSpec(
        "cola",
        "CoLA",
        ("sentence",),
        ("sentence",),
        "label",
        ("0", "1"),
        ("unacceptable", "acceptable"),
        ("matthews_corrcoef",),
        header=False,
        positions={"label": 1, "sentence": 3, "_width": 4},
    ),
    "sst2": TaskSpec(
        "sst2",
        "SST-2",
        ("sentence",),
        ("sentence",),
        "label",
        ("0", "1"),
        ("negative", "positive"),
        ("accuracy",),
    ),
    "mrpc": TaskSpec(
        "mrpc",
        "MRPC",
        ("#1 String", "#2 String"),
        ("sentence1", "sentence2"),
        "Quality",
        ("0", "1"),
        ("not_equivalent", "equivalent"),
        ("f1", "accuracy"),
    ),
    "stsb": TaskSpec(
        "stsb",
        "STS-B",
        ("sentence1", "sentence2"),
        ("sentence1", "sentence2"),
        "score",
        None,
        None,
        ("pearson", "spearman"),
    ),
    "qqp": TaskSpec(
        "qqp",
        "QQP",
        ("question1", "question2"),
        ("question1", "question2"),
        "is_duplicate",
        ("0", "1"),
        ("not_duplicate", "duplicate"),
        ("accuracy", "f1"),
    ),
    "mnli": TaskSpec(
        "mnli",
        "MNLI",
        ("sentence1", "sentence2"),
        ("premise", "hypothesis"),
        "gold_label",
        ("entailment", "neutral", "contradiction"),
        ("entailment", "neutral", "contradiction"),
        ("accuracy",),
        dev_splits=("dev_matched", "dev_mismatched"),
        t5_order=(1, 0),
    ),
    "qnli": TaskSpec(
        "qnli",
        "QNLI",
        ("question", "sentence"),
        ("question", "sentence"),
        "label",
        ("entailment", "not_entailment"),
        ("entailment", "not_entailment"),
        ("accuracy",),
    ),
    "rte": TaskSpec(
        "rte",
        "RTE",
        ("sentence1", "sentence2"),
        ("sentence1", "sentence2"),
        "label",
        ("entailment", "not_entailment"),
        ("entailment", "not_entailment"),
        ("accuracy",),
    ),
    "wnli": TaskSpec(
        "wnli",
        "WNLI",
        ("sentence1", "sentence2"),
        ("sentence1", "sentence2"),
        "label",
        ("0", "1"),
        ("not_entailment", "entailment"),
        ("accuracy",),
    ),
}

TASK_NAMES = (*GLUE_TASKS, "custom")


def get_task(name: str) -> TaskSpec:
    """The task named ``name``; a typo is an error listing the valid names (and a close one)."""
    key = name.lower().replace("-", "")
    if key in GLUE_TASKS:
        return GLUE_TASKS[key]
    import difflib

    close = difflib.get_close_matches(key, TASK_NAMES, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown task {name!r}{hint}; valid: {', '.join(TASK_NAMES)}")


def split_file(spec: TaskSpec, data_dir: str, split: str) -> str:
    """``DATA/<Folder>/<split>.tsv`` (the GLUE layout); the folder itself is also accepted."""
    for base in (os.path.join(data_dir, spec.folder), data_dir):
        path = os.path.join(base, f"{split}.tsv")
        if os.path.isfile(path):
            return path
    raise InputError(
        f"{os.path.join(data_dir, spec.folder, split + '.tsv')}: no such file "
        f"(--data must be a folder in the GLUE layout, e.g. {spec.folder}/{split}.tsv)"
    )


def _label_of(spec: TaskSpec, raw: str, where: str) -> int | float:
    if spec.labels is None:
        try:
            return float(raw)
        except ValueError:
            raise InputError(f"{where}: score {raw!r} is not a number") from None
    try:
        return spec.labels.index(raw)
    except ValueError:
        raise InputError(
            f"{where}: unknown label {raw!r} for {spec.name} (valid: {', '.join(spec.labels)})"
        ) from None


@contextlib.contextmanager
def _utf8(path: str) -> Iterator[None]:
    """A text file that is not UTF-8 (a spreadsheet's UTF-16 export, most often) is a one-line
    error naming the file, not a ``UnicodeDecodeError`` from deep inside ``csv``."""
    try:
        yield
    except UnicodeDecodeError as err:
        utf16 = err.start == 0 and bytes(err.object[:2]) in (b"\xff\xfe", b"\xfe\xff")
        hint = " (it looks like UTF-16: save it as UTF-8)" if utf16 else ""
        raise InputError(f"{path}: not UTF-8 text{hint}") from None


def load_glue(spec: TaskSpec, path: str, limit: int | None = None) -> list[Example]:
    """Rows of one GLUE TSV (``limit``: the first N rows only)."""
    examples: list[Example] = []
    with _utf8(path), open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        if spec.header:
            header = next(reader, None)
            if header is None:
                raise InputError(f"{path}: empty file (no header, no rows)")
            width = len(header)
            try:
                cols = [header.index(c) for c in spec.columns]
                label_col = header.index(spec.label_column)
            except ValueError:
                missing = [c for c in (*spec.columns, spec.label_column) if c not in header]
                raise InputError(
                    f"{path}:1: header has no column {missing[0]!r} for {spec.name} "
                    f"(header: {', '.join(header)})"
                ) from None
        else:
            width = spec.positions["_width"]
            cols = [spec.positions[c] for c in spec.columns]
            label_col = spec.positions[spec.label_column]
        for row in reader:
            line = reader.line_num
            if limit is not None and len(examples) >= limit:
                break
            if not row:
                raise InputError(f"{path}:{line}: empty line")
            if len(row) != width:
                what = "missing column" if len(row) < width else "extra tab"
                raise InputError(f"{path}:{line}: {what} ({len(row)} fields, expected {width})")
            texts = [row[c] for c in cols]
            label = _label_of(spec, row[label_col], f"{path}:{line}")
            examples.append(
                Example(len(examples), line, texts[0], texts[1] if len(texts) > 1 else None, label)
            )
    if not examples:
        raise InputError(f"{path}: no rows")
    return examples


# ------------------------------------------------------------------------------- custom data


@dataclass(frozen=True)
class CustomFields:
    text: str
    label: str
    pair: str | None = None
    regression: bool = False


def custom_spec(fields: CustomFields, labels: tuple[str, ...] | None) -> TaskSpec:
    """A TaskSpec for the user's own file: the label strings themselves are the T5 targets."""
    cols = (fields.text,) if fields.pair is None else (fields.text, fields.pair)
    if fields.regression:
        return TaskSpec("custom", "", cols, cols, fields.label, None, None, ("pearson", "spearman"))
    metrics = ("accuracy", "f1") if labels is not None and len(labels) == 2 else ("accuracy",)
    return TaskSpec("custom", "", cols, cols, fields.label, labels, labels, metrics)


def table_rows(path: str):
    """(line, dict) per record of a .tsv / .csv / .jsonl file (also the benchmark files of
    ``c4forge.contamination``)."""
    ext = os.path.splitext(path)[1].lower()
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    if ext == ".jsonl":
        with _utf8(path), open(path, encoding="utf-8-sig") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as err:
                    raise InputError(f"{path}:{line_no}: not JSON ({err.msg})") from None
                if not isinstance(rec, dict):
                    raise InputError(f"{path}:{line_no}: not a JSON object")
                yield line_no, rec
        return
    if ext not in (".tsv", ".csv"):
        raise InputError(f"{path}: unsupported file type {ext!r} (use .tsv, .csv or .jsonl)")
    with _utf8(path), open(path, encoding="utf-8-sig", newline="") as f:
        if ext == ".tsv":
            reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        else:
            reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return
        for row in reader:
            if len(row) != len(header):
                what = "missing column" if len(row) < len(header) else "extra field"
                raise InputError(
                    f"{path}:{reader.line_num}: {what} ({len(row)} fields, header has {len(header)})"
                )
            yield reader.line_num, dict(zip(header, row))


def load_custom(
    fields: CustomFields, path: str, labels: tuple[str, ...] | None = None
) -> tuple[list[Example], tuple[str, ...] | None]:
    """Rows of the user's file and the label set: taken from this file (sorted) when ``labels``
    is None (training data), else every label must be one of ``labels`` (never a new class)."""
    raw: list[tuple[int, str, str | None, str]] = []
    for line, rec in table_rows(path):
        for name in (fields.text, fields.label, fields.pair):
            if name is not None and name not in rec:
                raise InputError(f"{path}:{line}: no field {name!r} (has {', '.join(rec)})")
        pair = None if fields.pair is None else str(rec[fields.pair])
        raw.append((line, str(rec[fields.text]), pair, str(rec[fields.label]).strip()))
    if not raw:
        raise InputError(f"{path}: no rows")
    if not fields.regression and labels is None:
        labels = tuple(sorted({r[3] for r in raw}))
        if len(labels) < 2:
            raise InputError(f"{path}: only one label ({labels[0]!r}); a classifier needs two")
    spec = custom_spec(fields, None if fields.regression else labels)
    examples = [
        Example(i, line, a, b, _label_of(spec, label, f"{path}:{line}"))
        for i, (line, a, b, label) in enumerate(raw)
    ]
    return examples, spec.labels
