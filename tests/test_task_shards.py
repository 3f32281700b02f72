"""`c4forge shards task`: GLUE and custom tasks as packed text-to-text shard sets (real GLUE
files from tests/data/glue, a real SentencePiece vocabulary), verified and trainable in a mixture."""

from __future__ import annotations

import collections
import csv
import json
import os

import numpy as np
import pytest
import train_fixtures as fx

from c4forge.cli import main
from c4forge.formats.shards import ShardSet
from c4forge.vocab.vocab import Vocabulary

GLUE = os.path.join(os.path.dirname(__file__), "data", "glue")


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("taskvocab") / "vocab"
    fx.build_vocab(str(out), docs=150)
    return str(out)


def _build(vocab_dir, out, task, *extra, inputs_length=64):
    argv = [
        "shards",
        "task",
        task,
        "--vocab",
        vocab_dir,
        "--output",
        str(out),
        "--inputs-length",
        str(inputs_length),
        "--targets-length",
        "14",
        "--quiet",
        *extra,
    ]
    assert main(argv) == 0
    return ShardSet.open(str(out), vocab=vocab_dir)


def _examples(shards, vocab, split):
    """(input text, target text) of every packed example, split at the segment ids."""
    rows = shards.read_rows(split)
    out = []
    for i in range(len(rows["inputs"])):
        for seg in range(1, int(rows["inputs_segment_ids"][i].max()) + 1):
            ins = rows["inputs"][i][rows["inputs_segment_ids"][i] == seg]
            tgs = rows["targets"][i][rows["targets_segment_ids"][i] == seg]
            assert ins[-1] == 1 and tgs[-1] == 1  # each side ends with its EOS
            out.append((vocab.decode(ins[:-1].tolist()), vocab.decode(tgs[:-1].tolist())))
    return out


def test_glue_task_rows_are_t5_text_to_text_pairs_packed_with_segments(vocab_dir, tmp_path):
    shards = _build(vocab_dir, tmp_path / "sst2", "sst2", "--data", GLUE, "--num-shards", "2")
    assert shards.index["objective"]["name"] == "text_to_text"
    assert shards.index["objective"]["label_words"] == ["negative", "positive"]
    assert shards.verify(checksums=True)["files"] == 3  # two train shards + validation
    vocab = Vocabulary.load(vocab_dir)
    with open(os.path.join(GLUE, "SST-2", "train.tsv"), encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    pairs = _examples(shards, vocab, "train")
    assert len(pairs) == len(rows)  # every example exactly once, none dropped
    expected = collections.Counter(
        ("positive" if label == "1" else "negative") for _, label in rows
    )
    assert collections.Counter(t for _, t in pairs) == expected
    assert all(i.startswith("sst2 sentence:") for i, _ in pairs)
    packed = shards.read_rows("train")["inputs_segment_ids"].max(axis=1)
    assert packed.max() > 1  # short examples share rows
    # the first example of the file, found with its prefix and label word
    text = rows[0][0].strip()
    want = "positive" if rows[0][1] == "1" else "negative"
    assert any(i.startswith("sst2 sentence: " + text[:20]) and t == want for i, t in pairs)


def test_a_rebuild_is_byte_identical_and_a_pair_task_uses_both_fields(vocab_dir, tmp_path):
    a = _build(vocab_dir, tmp_path / "a", "rte", "--data", GLUE, inputs_length=512)
    b = _build(vocab_dir, tmp_path / "b", "rte", "--data", GLUE, inputs_length=512)
    assert a.index["splits"] == b.index["splits"] and a.fingerprint == b.fingerprint
    vocab = Vocabulary.load(vocab_dir)
    pairs = _examples(a, vocab, "validation")
    assert all(" sentence2: " in i and i.startswith("rte sentence1:") for i, _ in pairs)
    assert {t for _, t in pairs} == {"entailment", "not_entailment"}
    assert a.index["stats"]["validation"]["inputs_truncated"] == 0


def test_custom_jsonl_task_and_its_bad_rows(vocab_dir, tmp_path, capsys):
    data = tmp_path / "qa.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": f"what is {i} plus one?", "answer": str(i + 1)}) + "\n"
            for i in range(30)
        )
    )
    shards = _build(
        vocab_dir,
        tmp_path / "qa",
        "custom",
        "--data",
        str(data),
        "--input-field",
        "question",
        "--target-field",
        "answer",
    )
    pairs = _examples(shards, Vocabulary.load(vocab_dir), "train")
    assert sorted(pairs, key=lambda p: int(p[1])) == [
        (f"what is {i} plus one?", str(i + 1)) for i in range(30)
    ]
    assert "validation" not in shards.index["splits"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a", "answer": "b"}\n{"question": "c"}\n')
    argv = [
        "shards",
        "task",
        "custom",
        "--vocab",
        vocab_dir,
        "--output",
        str(tmp_path / "bad"),
        "--data",
        str(bad),
        "--input-field",
        "question",
        "--target-field",
        "answer",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"{bad}:2: no field 'answer' (has question)") and "\n" not in err


def test_unknown_task_is_one_line(vocab_dir, tmp_path, capsys):
    argv = ["shards", "task", "sst3", "--vocab", vocab_dir, "--output", str(tmp_path / "x")]
    assert main(argv) == 2
    assert "unknown task 'sst3' (did you mean 'sst2'?)" in capsys.readouterr().err


def test_a_task_set_trains_in_a_mixture_with_c4(vocab_dir, tmp_path):
    pytest.importorskip("torch")
    from c4forge.trainers.train import train

    desc = json.loads(open(os.path.join(vocab_dir, "vocab.json")).read())
    fx.build_shards(str(tmp_path / "shards"), vocab_dir, desc, docs=30)
    _build(vocab_dir, tmp_path / "sst2", "sst2", "--data", GLUE)
    (tmp_path / "vocab").symlink_to(vocab_dir)
    opts = fx.tiny_options(
        tmp_path,
        tmp_path / "run",
        steps=3,
        mix=(str(tmp_path / "sst2"),),
        mix_strategy="proportional",
        mix_limit=200,
    )
    summary = train(opts)
    assert np.isfinite(summary.final_loss)
    assert "sst2" in summary.text() and summary.evaluation["eval_nll_sst2"] > 0
    # the multi-task checkpoint's text head, scored as it is (a small dev file: decoding is slow)
    small = tmp_path / "glue" / "SST-2"
    small.mkdir(parents=True)
    lines = open(os.path.join(GLUE, "SST-2", "dev.tsv"), encoding="utf-8").readlines()[:17]
    (small / "dev.tsv").write_text("".join(lines), encoding="utf-8")
    zs = tmp_path / "zero-shot"
    argv = [
        "evaluate",
        str(tmp_path / "run"),
        "--task",
        "sst2",
        "--data",
        str(small.parent),
        "-o",
        str(zs),
        "--no-progress",
    ]
    assert main(argv) == 0
    res = json.loads((zs / "results.json").read_text())
    assert res["init"] == "pretrained (no fine-tuning)" and res["examples"] == {"dev": 16}
    preds = [json.loads(x) for x in (zs / "predictions.jsonl").read_text().splitlines()]
    right = np.mean([p["label"] == p["prediction"] for p in preds])
    assert res["metrics"]["dev"]["accuracy"] == pytest.approx(right)
    assert res["invalid_outputs"]["dev"] == sum(p["prediction"] == -1 for p in preds)
    # … and it fine-tunes like any other checkpoint
    small_train = tmp_path / "glue" / "SST-2" / "train.tsv"
    small_train.write_text("".join(lines), encoding="utf-8")
    ft = tmp_path / "ft"
    argv = [
        "finetune",
        str(tmp_path / "run"),
        "--task",
        "sst2",
        "--data",
        str(small.parent),
        "-o",
        str(ft),
        "--head",
        "text",
        "--steps",
        "2",
        "--batch-size",
        "4",
        "--no-progress",
    ]
    assert main(argv) == 0
    assert json.loads((ft / "results.json").read_text())["init"] == "pretrained"


def test_cut_inputs_are_said_in_task_words_with_the_length_that_fits(vocab_dir, tmp_path, capsys):
    """Inputs longer than the row are counted in the summary, warned about on stderr (even with
    --quiet) with the --inputs-length that keeps every one whole, and the summary speaks of
    examples (not docs, trimmed targets or sentinels, which are span corruption's words)."""
    from c4forge.glue.formats import t5_input
    from c4forge.glue.tasks import get_task, load_glue, split_file

    spec, vocab = get_task("sst2"), Vocabulary.load(vocab_dir)
    sizes = {}  # split -> tokens + EOS of each input, counted here from the GLUE files
    for split, name in (("train", "train"), ("validation", spec.dev_splits[0])):
        texts = [t5_input(spec, ex) for ex in load_glue(spec, split_file(spec, GLUE, name))]
        sizes[split] = [len(a) + 1 for a in vocab.encode_arrays(texts)]
    fits = max(max(v) for v in sizes.values())
    cut = {split: sum(n > 16 for n in v) for split, v in sizes.items()}
    assert 0 < cut["train"] < len(sizes["train"])  # the real file has short and long inputs

    argv = [
        "shards",
        "task",
        "sst2",
        "--vocab",
        vocab_dir,
        "--data",
        GLUE,
        "--inputs-length",
        "16",
        "--targets-length",
        "14",
        "-o",
        str(tmp_path / "short"),
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    said = (
        f"{cut['train']:,} of {len(sizes['train']):,} train inputs "
        f"({cut['train'] / len(sizes['train']):.1%}) and {cut['validation']:,} of "
        f"{len(sizes['validation']):,} validation inputs"
    )
    tail = f"are longer than --inputs-length 16 and lost their tail; --inputs-length {fits} keeps"
    assert f"c4forge shards task: warning: {said}" in err and tail in err
    assert said in out and tail in out  # the summary says it too
    assert f"examples {len(sizes['train']):,}," in out and f"inputs cut {cut['train']:,}" in out
    assert out.startswith("c4forge shards task: sst2 (text_to_text) 16/14 ")
    for words in ("docs", "empty", "trimmed targets", "sentinels"):
        assert words not in out, words

    # the length the warning names keeps every input whole: no cut, no warning
    argv[argv.index("16")] = str(fits)
    argv[-1] = str(tmp_path / "whole")
    assert main([*argv, "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    stats = ShardSet.open(str(tmp_path / "whole"), vocab=vocab_dir).index["stats"]
    assert [st["inputs_truncated"] for st in stats.values()] == [0, 0]
