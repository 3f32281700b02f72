"""`c4forge shards` on every engine: sorted runs merged into the same bytes, whatever the engine,
the worker count or an interruption; the accounting that refuses index.json.

The rows of a clean shard go to sorted runs (``shards.runs``) and each output shard is the
merge of its runs; these tests hold that to the bytes of the Beam build with one worker
(itself held to the shards format elsewhere), on the bundled real C4 sample and a real
SentencePiece vocabulary.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from shards_fixtures import corpus_fixtures, files_of_dir, leave_one_unit, shards_argv

from c4forge.cli import main
from c4forge.shards import runs

INPUTS_LENGTH = 128

work, docs, vocab_dir, vocab = corpus_fixtures(
    "shards-engines", per_train_file=300, total=None, vocab_size=800, sample_chars=400_000
)


def shards(docs: str, vocab: str, out: str, *extra: str) -> int:
    options = {"inputs_length": INPUTS_LENGTH, "num_shards": "train=3,validation=2"}
    return main(shards_argv(docs, vocab, out, "--batch-rows", "100", "--quiet", *extra, **options))


@pytest.fixture(scope="module")
def reference(work, docs, vocab_dir):
    out = str(work / "beam-1")
    assert shards(docs, vocab_dir, out, "--engine", "beam", "--workers", "1") == 0
    return files_of_dir(out)


def test_merge_of_sorted_runs_is_one_sort(tmp_path) -> None:
    """Segments of several runs, merged a batch at a time, give the rows of one global sort,
    re-cut into batches of exactly the asked size."""
    spec = [{"name": "inputs", "type": "fixed_size_list<int32>", "length": 3}]
    rng = np.random.default_rng(0)
    all_keys, all_order, all_rows = [], [], []
    paths = []
    for r in range(3):
        path = str(tmp_path / f"run{r}.arrow")
        with runs.RunSet(spec) as out:
            w = out.get("x", path)
            for s in range(4):
                n = int(rng.integers(0, 2500))  # empty segments and multi-batch ones
                keys = rng.integers(0, 50, n, dtype=np.uint64)  # many equal keys: order decides
                order = np.arange(n, dtype=np.uint64) + np.uint64((r * 4 + s) << 32)
                rows = rng.integers(0, 1000, (n, 3)).astype(np.int32)
                w.add_segment(*runs.sort_block(keys, order, {"inputs": rows}))
                all_keys.append(keys), all_order.append(order), all_rows.append(rows)
        paths.append((path, w.segments))
    keys, order = np.concatenate(all_keys), np.concatenate(all_order)
    want = np.concatenate(all_rows)[np.lexsort((order, keys))]
    batches = list(runs.rebatch(runs.merged_rows(paths, spec), 700))
    assert [len(b["inputs"]) for b in batches[:-1]] == [700] * (len(batches) - 1)
    assert 0 < len(batches[-1]["inputs"]) <= 700
    np.testing.assert_array_equal(np.concatenate([b["inputs"] for b in batches]), want)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_every_engine_writes_the_same_bytes(engine, reference, work, docs, vocab_dir) -> None:
    if engine == "spark":
        pytest.importorskip("pyspark")
    extra = ["--master", "local[2]"] if engine == "spark" else []
    out = str(work / f"{engine}-2")
    assert shards(docs, vocab_dir, out, "--engine", engine, "--workers", "2", *extra) == 0
    assert files_of_dir(out) == reference
    assert not os.path.exists(os.path.join(out, "_progress"))  # the runs are gone


def test_interrupted_build_resumes_to_the_same_bytes(reference, work, docs, vocab_dir, capsys):
    """What a build killed after its first clean shard leaves (build record, that shard's runs
    and counters), then ``--resume``: that clean shard is not tokenized again."""
    from c4forge.shards.parts import whole

    out = str(work / "killed")
    argv = shards_argv(
        docs,
        vocab_dir,
        out,
        "--batch-rows",
        "100",
        "--engine",
        "local",
        inputs_length=INPUTS_LENGTH,
        num_shards="train=3,validation=2",
    )
    leave_one_unit(argv, lambda job, build: whole("train", build.clean_files["train"][0]))
    capsys.readouterr()
    assert main([*argv, "--resume", "--workers", "2"]) == 0
    err = capsys.readouterr().err
    assert "1 clean shard(s) tokenized by an earlier run, reused; 2 built now" in err
    assert files_of_dir(out) == {k: v for k, v in reference.items()}


def test_documents_that_do_not_add_up_are_refused(work, docs, vocab_dir, capsys) -> None:
    """A clean folder whose stats.json counts one train document more than its files hold (a
    shard replaced after the clean run): no index.json, and the error names the step."""
    from c4forge.corpus.clean_docs import CLEAN_STATS_FORMAT, iter_documents

    d = str(work / "docs-short")
    shutil.copytree(docs, d)
    held = {
        split: sum(
            1
            for n in os.listdir(d)
            if n.startswith(f"c4-{split}.")
            for _ in iter_documents(os.path.join(d, n))
        )
        for split in ("train", "validation")
    }
    stats = {
        "format": CLEAN_STATS_FORMAT,
        "format_version": 1,
        "outputs": {
            "train": {"documents": held["train"] + 1},
            "validation": {"documents": held["validation"]},
        },
    }
    with open(os.path.join(d, "stats.json"), "w") as f:
        json.dump(stats, f)
    out = str(work / "short")
    code = shards(d, vocab_dir, out, "--engine", "local", "--workers", "1")
    err = capsys.readouterr().err
    assert code != 0
    assert f"train: {d}: {held['train'] + 1:,} in, {held['train']:,} out of step 'read'" in err
    assert not os.path.exists(os.path.join(out, "index.json"))


def test_progress_bars_end_at_100_percent_on_the_local_engine(work, docs, vocab_dir, capsys):
    """A build shorter than one polling period (the local engine on the sample) still closes
    its bars on what it did: every clean shard read, every shard written."""
    import re

    out = str(work / "progress-local")
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
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert re.search(r"^shards written: 5/5 shard \(100%\)", err, re.M), err
    assert re.search(r"^clean shards read: (\d+)/\1 (file|part) \(100%\)", err, re.M), err
    assert " 0%" not in err
