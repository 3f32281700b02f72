"""Benchmarks named on the command line: ``glue`` or ``NAME=FILE[#FIELD,FIELD]``.

``glue``: every GLUE task bundled in ``c4forge/data/glue`` that has a dev split, one benchmark
per task (``cola``, ``mrpc``, ``rte``, ``sst2``, ``stsb``), read with the fine-tuning loaders
(``c4forge.finetune.tasks``), text columns only. ``NAME=FILE``: a ``.tsv``, ``.csv`` or
``.jsonl`` file whose text is in the field ``text`` unless ``#FIELD`` names others
(``#sentence1,sentence2``); a file with a header of one column uses that column. The split of
such a benchmark is the file's stem (``dev.tsv`` → ``dev``). Several specs, several benchmarks;
their order decides which one a document is counted under when it matches more than one.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass

from c4forge.contamination.ngrams import Example
from c4forge.data import BUNDLED_GLUE
from c4forge.errors import ConfigError, InputError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
GLUE_ORDER = ("cola", "mrpc", "rte", "sst2", "stsb")


@dataclass(frozen=True)
class Source:
    """One benchmark split's file (``fields``: the text columns, None for GLUE's own)."""

    benchmark: str
    split: str
    path: str
    fields: tuple[str, ...] | None = None
    task: str | None = None  # GLUE task name (its loader)


def split_specs(text: str) -> list[str]:
    """One ``--decontaminate`` value → its specs: ``glue,mine=eval.jsonl#q,a`` → ``glue`` and
    ``mine=eval.jsonl#q,a``. Commas separate specs, except inside a ``#FIELD,FIELD`` list: a
    piece that is neither ``glue`` nor ``NAME=…`` continues the previous spec's field list.

    Why one value per flag (repeatable, or comma-joined) rather than ``nargs="+"``: a flag that
    takes any number of values swallows the positional INPUT that follows it
    (``--decontaminate glue IN -o OUT``)."""
    specs: list[str] = []
    for piece in text.split(","):
        starts = piece == "glue" or "=" in piece
        if specs and not starts and "#" in specs[-1]:
            specs[-1] += "," + piece
        else:
            specs.append(piece)
    return [s for s in specs if s] or [text]


def flatten_specs(values: list[str] | None) -> tuple[str, ...]:
    """The specs of every ``--decontaminate`` flag given, in order (``split_specs`` of each)."""
    return tuple(spec for value in values or () for spec in split_specs(value))


def parse_specs(specs: tuple[str, ...] | list[str]) -> list[Source]:
    """The files behind ``specs``, checked now (a missing file or bad name is a one-line error)."""
    sources: list[Source] = []
    for spec in specs:
        if spec == "glue":
            sources += glue_sources()
            continue
        name, eq, rest = spec.partition("=")
        if not eq or not rest:
            raise ConfigError(f"--decontaminate/--eval {spec!r}: expected glue or NAME=FILE")
        if not _NAME.match(name) or name == "glue":
            raise ConfigError(
                f"benchmark name {name!r}: use letters, digits, '_', '.', '-' (not 'glue')"
            )
        path, _, fields = rest.partition("#")
        if not os.path.isfile(path):
            raise InputError(f"benchmark {name}: {path}: no such file")
        stem = os.path.basename(path).split(".", 1)[0]
        names = tuple(f for f in fields.split(",") if f) if fields else None
        sources.append(Source(name, stem, path, names))
    seen: set[tuple[str, str]] = set()
    for s in sources:
        if (s.benchmark, s.split) in seen:
            raise ConfigError(f"benchmark {s.benchmark} split {s.split} is given twice")
        seen.add((s.benchmark, s.split))
    return sources


def glue_sources() -> list[Source]:
    from c4forge.finetune.tasks import GLUE_TASKS

    root = BUNDLED_GLUE
    out = []
    for task in GLUE_ORDER:
        spec = GLUE_TASKS[task]
        for split in spec.dev_splits:
            path = os.path.join(root, spec.folder, f"{split}.tsv")
            if os.path.isfile(path):
                out.append(Source(task, split, path, None, task))
    return out


def load_examples(source: Source) -> list[Example]:
    if source.task is not None:
        from c4forge.finetune.tasks import GLUE_TASKS, load_glue

        rows = load_glue(GLUE_TASKS[source.task], source.path)
        return [
            Example(
                source.benchmark,
                source.split,
                r.index,
                r.line,
                (r.text_a,) if r.text_b is None else (r.text_a, r.text_b),
            )
            for r in rows
        ]
    from c4forge.finetune.tasks import table_rows

    out = []
    for line, rec in table_rows(source.path):  # .tsv / .csv / .jsonl, one-line errors
        fields = _pick(source, list(rec), f"{source.path}:{line}")
        texts = tuple(rec[k] for k in fields)
        if not all(isinstance(t, str) for t in texts):
            raise InputError(f"{source.path}:{line}: field(s) {', '.join(fields)} not text")
        out.append(Example(source.benchmark, source.split, len(out), line, texts))
    if not out:
        raise InputError(f"benchmark {source.benchmark}: {source.path}: no rows")
    return out


def _pick(source: Source, available: list[str], where: str) -> tuple[str, ...]:
    default = ("text",) if "text" in available or len(available) != 1 else (available[0],)
    fields = source.fields or default
    missing = [f for f in fields if f not in available]
    if missing:
        raise InputError(
            f"{where}: no field {missing[0]!r} (has: {', '.join(available)}); name the text "
            f"field(s) with {source.benchmark}=FILE#FIELD"
        )
    return fields


def _display(s: Source) -> str:
    """How stats.json names the file: ``glue/CoLA/dev.tsv`` (bundled) or its base name."""
    if s.task is not None:
        return f"glue/{os.path.basename(os.path.dirname(s.path))}/{os.path.basename(s.path)}"
    return os.path.basename(s.path)


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load(specs: tuple[str, ...] | list[str], n: int, keep_owners: bool = False):
    """``(index, fingerprints)`` for ``specs``: the n-gram index over every benchmark and, per
    benchmark, what stats.json records (n, files with sha256, examples, grams)."""
    from c4forge.contamination.ngrams import build_index

    sources = parse_specs(list(specs))
    if not sources:
        raise InputError("no benchmark files found")
    per_bench: dict[str, list[Example]] = {}
    files: dict[str, list[dict]] = {}
    for s in sources:
        ex = load_examples(s)
        per_bench.setdefault(s.benchmark, []).extend(ex)
        files.setdefault(s.benchmark, []).append(
            {
                "split": s.split,
                "file": _display(s),
                "sha256": file_sha256(s.path),
                "examples": len(ex),
            }
        )
    index, info = build_index(list(per_bench.items()), n, keep_owners)
    prints = {
        name: {"n": n, "files": files[name], "examples": len(per_bench[name]), **info[name]}
        for name in per_bench
    }
    return index, prints
