"""A clean shard built in parts (``shards.parts``): the same bytes as built whole, on the local
engine and Beam, with a document that encodes to nothing before or after a cut, and after an
interrupted build resumed.

The input is one train clean shard (900 real C4 documents) and a validation shard (100): the
shape of a corpus under 356,000 documents, where parts are what gives a second worker work.
``MIN_PART_DOCUMENTS`` is lowered so that 900 documents are cut.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os

import pytest
from shards_fixtures import (
    SAMPLE,
    files_of_dir,
    leave_one_unit,
    shards_argv,
    train_vocab,
    write_c4_file,
)

from c4forge.cli import main
from c4forge.shards import parts

INPUTS_LENGTH = 128


def _sample() -> list[dict]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _release(directory, docs: list[dict]) -> str:
    directory.mkdir()
    write_c4_file(str(directory / "c4-train.00000-of-00001.json.gz"), docs[:900])
    write_c4_file(str(directory / "c4-validation.00000-of-00001.json.gz"), docs[900:])
    return str(directory)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("shards-parts")


@pytest.fixture(scope="module")
def docs(work):
    return _release(work / "docs", _sample())


@pytest.fixture(scope="module")
def vocab_dir(work, docs):
    out = str(work / "vocab")
    train_vocab(out, docs, vocab_size=800, sample_chars=400_000)
    return out


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    monkeypatch.setattr(parts, "MIN_PART_DOCUMENTS", 64)


def shards(docs: str, vocab: str, out: str, *extra: str) -> int:
    options = {"inputs_length": INPUTS_LENGTH, "num_shards": "train=3,validation=2"}
    return main(shards_argv(docs, vocab, out, "--batch-rows", "100", "--quiet", *extra, **options))


def whole_build(docs: str, vocab: str, out: str) -> dict[str, bytes]:
    """The reference: one worker, so each clean shard is one unit."""
    assert shards(docs, vocab, out, "--engine", "local", "--workers", "1") == 0
    return files_of_dir(out)


@pytest.fixture(scope="module")
def reference(work, docs, vocab_dir):
    return whole_build(docs, vocab_dir, str(work / "whole"))


def test_plan_cuts_at_group_boundaries() -> None:
    files = {"train": ["/d/a", "/d/b"], "validation": ["/d/v"]}
    sizes = {"/d/a": 700, "/d/b": 250, "/d/v": 50}
    asked = []

    def documents(path: str) -> int:
        asked.append(path)
        return {"/d/a": 70_000, "/d/b": 25_000}[path]

    plan = parts.plan(files, sizes, documents, workers=4, group=128)
    a = [p for p in plan if p.path == "/d/a"]
    assert [p.count for p in plan] == [3, 3, 3, 1, 1]  # round(4 × 0.7) = 3, round(4 × 0.25) = 1
    assert [(p.start, p.stop) for p in a] == [(0, 23296), (23296, 46592), (46592, None)]
    assert all(p.start % 128 == 0 for p in a)
    assert asked == ["/d/a"]  # documents are counted only for a file to be cut
    assert [p.count for p in parts.plan(files, sizes, documents, workers=1, group=128)] == [1] * 3
    parts.MIN_PART_DOCUMENTS = 30_000  # a part below the minimum is not worth a process
    assert [p.count for p in parts.plan(files, sizes, documents, workers=4, group=128)] == [
        2,
        2,
        1,
        1,
    ]


def test_parts_give_the_bytes_of_whole_clean_shards(reference, work, docs, vocab_dir) -> None:
    from c4forge.cli import build_parser
    from c4forge.shards.build import resolve
    from c4forge.shards.cli import job_from_args
    from c4forge.shards.driver import plan_units

    argv = shards_argv(docs, vocab_dir, str(work / "x"), "--workers", "2")
    args, extra = build_parser().parse_known_args(argv)
    job = job_from_args(args, extra)
    units = plan_units(job, resolve(job))
    assert [(u.split, u.start, u.stop) for u in units] == [
        ("train", 0, 512),  # 900 documents: 8 groups of 128, cut after 4
        ("train", 512, None),
        ("validation", 0, None),
    ]
    engines = [("local",), ("beam",)]
    if importlib.util.find_spec("pyspark") is not None:
        engines.append(("spark", "--master", "local[2]"))
    for engine, *extra in engines:
        out = str(work / f"parts-{engine}")
        assert shards(docs, vocab_dir, out, "--engine", engine, "--workers", "2", *extra) == 0
        assert files_of_dir(out) == reference, engine


@pytest.mark.parametrize("where", [5, 700])
def test_a_document_without_tokens_before_or_after_the_cut(
    where, work, vocab_dir, monkeypatch
) -> None:
    """An empty document shifts the groups after it. In the first part, the parts after it
    would be wrong: the clean shard is built again whole. In the last part, nothing is redone.
    Either way the bytes are those of the whole build."""
    docs = _sample()
    docs.insert(where, {**docs[where], "text": ""})
    d = _release(work / f"empty-{where}", docs[:1000])
    want = whole_build(d, vocab_dir, str(work / f"empty-{where}-whole"))
    out = str(work / f"empty-{where}-parts")
    assert shards(d, vocab_dir, out, "--engine", "local", "--workers", "2") == 0
    assert files_of_dir(out) == want
    index = json.loads(open(os.path.join(out, "index.json")).read())
    assert index["stats"]["train"]["documents_empty"] == 1
    # Without the check the first case's second part numbers its groups wrongly.
    monkeypatch.setattr(parts, "misplaced", lambda records: set())
    unchecked = str(work / f"empty-{where}-unchecked")
    assert shards(d, vocab_dir, unchecked, "--engine", "local", "--workers", "2") == 0
    assert (files_of_dir(unchecked) == want) == (where == 700)


def test_an_interrupted_parts_build_resumes_to_the_same_bytes(
    reference, work, docs, vocab_dir, capsys
) -> None:
    """What a build killed after its first part leaves (that part's runs and counters), then
    ``--resume`` with the same workers: that part is not tokenized again."""
    from c4forge.shards.driver import plan_units

    out = str(work / "killed")
    argv = shards_argv(
        docs,
        vocab_dir,
        out,
        "--batch-rows",
        "100",
        "--engine",
        "local",
        "--workers",
        "2",
        inputs_length=INPUTS_LENGTH,
        num_shards="train=3,validation=2",
    )
    first = leave_one_unit(argv, lambda job, build: plan_units(job, build)[0])
    assert first.count == 2
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "1 clean shard(s) or parts tokenized by an earlier run, reused; 2 built now" in err
    assert files_of_dir(out) == reference


def test_parts_with_rows_per_shard(work, docs, vocab_dir) -> None:
    """``--rows-per-shard``: the parts' unsplit runs are split by the row total's shard count."""

    def build(out: str, workers: str) -> dict[str, bytes]:
        argv = shards_argv(
            docs,
            vocab_dir,
            out,
            "--batch-rows",
            "100",
            "--quiet",
            "--engine",
            "local",
            "--workers",
            workers,
            inputs_length=INPUTS_LENGTH,
            rows_per_shard=1500,
        )
        assert main(argv) == 0
        return files_of_dir(out)

    whole = build(str(work / "rps-whole"), "1")
    assert sum(n.startswith("train-") for n in whole) == 4  # 5,699 rows
    assert build(str(work / "rps-parts"), "2") == whole
