"""Inputs shared by the `c4forge shards` tests: the bundled real C4 sample laid out as the
AllenAI C4 release, and a real SentencePiece vocabulary trained on it.

`corpus_fixtures` makes a test module's module-scoped fixtures (each module picks its own
sizes), so one change to the layout reaches every shards test.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

SAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "c4forge", "data", "sample", "c4-sample.00000-of-00001.json.gz"
)
TRAIN_FILES = ("c4-train.00000-of-00002.json.gz", "c4-train.00001-of-00002.json.gz")
VALIDATION_FILE = "c4-validation.00000-of-00001.json.gz"
# Columns of a per_document packed set, in order (formats.md §3.2): the tests' own copy of the
# spec, not the code's list.
PACKED_COLUMNS = [
    "inputs",
    "targets",
    "inputs_segment_ids",
    "inputs_positions",
    "targets_segment_ids",
    "targets_positions",
]


def write_c4_file(path: str, docs: list[dict]) -> None:
    """One C4-release file: {"text","timestamp","url"} lines, gzip mtime 0."""
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        for d in docs:
            rec = {"text": d["text"], "timestamp": d["date"], "url": d["url"]}
            f.write((json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode())


def write_c4_release(directory: Path, per_train_file: int, total: int | None = None) -> str:
    """The first ``total`` sample documents as two train files of ``per_train_file`` documents
    each and one validation file with the rest; returns the folder."""
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as f:
        sample = [json.loads(line) for line in f][:total]
    directory.mkdir()
    n = per_train_file
    write_c4_file(str(directory / TRAIN_FILES[0]), sample[:n])
    write_c4_file(str(directory / TRAIN_FILES[1]), sample[n : 2 * n])
    write_c4_file(str(directory / VALIDATION_FILE), sample[2 * n :])
    return str(directory)


def train_vocab(out: str, docs: str, vocab_size: int, sample_chars: int):
    """A real SentencePiece vocabulary on ``docs`` (the `c4forge vocab` code path)."""
    from c4forge.vocab.train import Source, build_vocab

    return build_vocab(
        [Source("en", docs)], out, vocab_size=vocab_size, sample_chars=sample_chars, progress=False
    )


def corpus_fixtures(
    name: str, *, per_train_file: int, total: int | None, vocab_size: int, sample_chars: int
):
    """Module-scoped ``work``, ``docs``, ``vocab_dir`` and ``vocab`` fixtures; a test module
    binds them to those names (pytest finds fixtures by name in the module)."""

    @pytest.fixture(scope="module")
    def work(tmp_path_factory):
        return tmp_path_factory.mktemp(name)

    @pytest.fixture(scope="module")
    def docs(work):
        return write_c4_release(work / "docs", per_train_file, total)

    @pytest.fixture(scope="module")
    def vocab_dir(work, docs):
        out = str(work / "vocab")
        train_vocab(out, docs, vocab_size=vocab_size, sample_chars=sample_chars)
        return out

    @pytest.fixture(scope="module")
    def vocab(vocab_dir):
        from c4forge.vocab.vocab import Vocabulary

        return Vocabulary.load(vocab_dir)

    return work, docs, vocab_dir, vocab


def shards_argv(docs: str, vocab_dir: str, out: str, *extra: str, **options: object) -> list[str]:
    """`c4forge shards DOCS --vocab V --output OUT [--option value ...] EXTRA...` as a
    `c4forge.cli.main` argv (``inputs_length=64`` → ``--inputs-length 64``)."""
    argv = ["shards", docs, "--vocab", vocab_dir, "--output", out]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return [*argv, *extra]


def leave_one_unit(argv: list[str], pick) -> object:
    """What a build killed after one unit of its rows step leaves on disk (the build record,
    that unit's runs and counters): ``pick(job, build)`` names the unit; returns it."""
    from c4forge.cli import build_parser
    from c4forge.engines.local import LocalEngine
    from c4forge.shards import stage
    from c4forge.shards.build import resolve
    from c4forge.shards.cli import job_from_args
    from c4forge.shards.output import prepare_output

    args, extra = build_parser().parse_known_args(argv)
    job = job_from_args(args, extra)
    build = resolve(job)
    assert prepare_output(build, overwrite=False) == "fresh"
    unit = pick(job, build)
    engine = LocalEngine(workers=1)
    try:
        kwargs = {"build": build, "counts": dict(build.num_shards), "skip": frozenset()}
        built = list(stage.build_runs(unit, engine.bag, resume=False, **kwargs))
    finally:
        engine.close()
    assert built and all(os.path.exists(run[0]) for _key, run in built)
    return unit


def files_of_dir(directory: str) -> dict[str, bytes]:
    """Every file under ``directory`` by relative path, with its bytes."""
    out = {}
    for root, _dirs, names in os.walk(directory):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, directory)] = f.read()
    return out


def contains(haystack: np.ndarray, needle) -> bool:
    """Is ``needle`` a contiguous run of ``haystack`` (int32 arrays compared as bytes)?"""
    hay = np.asarray(haystack).astype("<i4").tobytes()
    pin = np.asarray(needle, dtype="<i4").tobytes()
    pos = hay.find(pin)
    while pos >= 0:
        if pos % 4 == 0:
            return True
        pos = hay.find(pin, pos + 1)
    return False


def hf_splits(shard_dir: str, cache_dir: str, splits=("train", "validation")):
    """The shard set opened the way a user of HF `datasets` would: the generic "arrow" loader
    over each split's `<split>-*.arrow` files."""
    from datasets import load_dataset

    files = {split: os.path.join(shard_dir, f"{split}-*.arrow") for split in splits}
    return load_dataset("arrow", data_files=files, cache_dir=cache_dir)
