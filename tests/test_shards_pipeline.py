"""`c4forge shards` end to end: real documents, a real SentencePiece vocabulary, the Beam job,
real Arrow files read back with pyarrow and HF `datasets`, resume and refusal paths.

The documents are the bundled real C4 sample laid out exactly as the AllenAI C4 release
(c4-train.0000N-of-00002.json.gz, c4-validation.00000-of-00001.json.gz, `date` renamed to
`timestamp`), which the job must accept as is. Pipeline runs are shared through module-scoped
fixtures to keep the file fast.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest
from shards_fixtures import (
    PACKED_COLUMNS,
    TRAIN_FILES,
    VALIDATION_FILE,
    contains,
    corpus_fixtures,
    hf_splits,
    shards_argv,
    train_vocab,
    write_c4_file,
)

from c4forge.cli import main
from c4forge.corpus.clean_docs import iter_documents
from c4forge.errors import ConfigError, InputError, OutputExistsError
from c4forge.formats import shards as S
from c4forge.io.storage import write_json

INPUTS_LENGTH = 128  # small rows: more rows from a small sample, same code paths as 512


work, docs, vocab_dir, vocab = corpus_fixtures(
    "shards", per_train_file=450, total=None, vocab_size=1000, sample_chars=600_000
)


def shards(docs: str, vocab: str, out: str, *extra: str) -> int:
    options = {"inputs_length": INPUTS_LENGTH, "num_shards": "train=3,validation=2"}
    return main(shards_argv(docs, vocab, out, "--batch-rows", "256", "--quiet", *extra, **options))


@pytest.fixture(scope="module")
def concat_set(work, docs, vocab_dir):
    out = str(work / "concat")
    assert shards(docs, vocab_dir, out, "--workers", "1") == 0
    return out


@pytest.fixture(scope="module")
def packed_set(work, docs, vocab_dir):
    out = str(work / "packed")
    args = [
        "--packing",
        "per_document",
        "--rows-per-shard",
        "700",
        "--workers",
        "1",
        "--token-dtype",
        "int32",
        "--compression",
        "lz4",
        "--pack-window",
        "256",
    ]
    argv = shards_argv(docs, vocab_dir, out, "--quiet", *args, inputs_length=INPUTS_LENGTH)
    assert main([*argv, "--batch-rows", "256"]) == 0
    return out


def files_of(directory: str) -> dict[str, bytes]:
    return {
        n: open(os.path.join(directory, n), "rb").read()
        for n in sorted(os.listdir(directory))
        if n.endswith(".arrow") or n == "index.json"
    }


def mtimes(directory: str) -> dict[str, int]:
    return {n: os.stat(os.path.join(directory, n)).st_mtime_ns for n in files_of(directory)}


def all_tokens(path: str, vocab) -> list[list[int]]:
    return vocab.encode_batch([d["text"] for d in iter_documents(path)])


def reconstruct(inputs: np.ndarray, targets: np.ndarray, vocab_size: int) -> list[int]:
    """Replace each input sentinel by the target tokens after the same sentinel (objectives §6.4)."""
    first_sentinel = vocab_size - 100
    spans: dict[int, list[int]] = {}
    current = None
    for t in targets.tolist():
        if t in (0, 1):
            break
        if t >= first_sentinel:
            current = t
            spans[t] = []
        else:
            spans[current].append(t)
    out: list[int] = []
    for t in inputs.tolist():
        if t in (0, 1):
            break
        out.extend(spans[t] if t >= first_sentinel else [t])
    return out


# ----------------------------------------------------------------------------- the shards


def test_manifest_and_layout(concat_set, vocab, docs, vocab_dir):
    index = json.load(open(os.path.join(concat_set, "index.json")))
    assert index["format"] == "c4forge.shards" and index["format_version"] == 1
    assert index["vocabulary"] == vocab.descriptor()
    assert index["token_dtype"] == "uint16"
    assert index["objective"]["inputs_length"] == INPUTS_LENGTH
    assert index["objective"]["targets_length"] == 29 and index["objective"]["tokens_length"] == 141
    # no stats.json (a C4 release's layout): the clean files are bound by their content
    hashed = index["source"].pop("clean_files_sha256")
    assert index["source"] == {
        "clean_stats_sha256": None,
        "documents": {"train": 900, "validation": 100},
    }
    for files in hashed.values():
        for name, digest in files.items():
            assert digest == hashlib.sha256(open(os.path.join(docs, name), "rb").read()).hexdigest()
    assert sorted(hashed) == ["train", "validation"] and len(hashed["train"]) >= 1
    index["source"]["clean_files_sha256"] = hashed
    assert index["dataset_fingerprint"] == S.dataset_fingerprint(index)
    assert set(index["versions"]) == {"numpy", "pyarrow", "sentencepiece"}
    train = index["splits"]["train"]
    assert [s["file"] for s in train["shards"]] == [
        f"train-0000{i}-of-00003.arrow" for i in range(3)
    ]
    assert index["splits"]["validation"]["num_shards"] == 2
    stats = index["stats"]["train"]
    assert stats["documents"] == 900 and stats["rows"] == train["rows"] == stats["examples"]
    assert stats["input_tokens"] == train["input_tokens"]
    assert sorted(os.listdir(concat_set)) == sorted(
        ["index.json", "vocab"] + [s["file"] for b in index["splits"].values() for s in b["shards"]]
    )
    # The shard set carries its vocabulary: the vocab folder's files, byte for byte.
    copied = os.path.join(concat_set, "vocab")
    assert sorted(os.listdir(copied)) == sorted(os.listdir(vocab_dir))
    for name in os.listdir(vocab_dir):
        assert (
            open(os.path.join(copied, name), "rb").read()
            == open(os.path.join(vocab_dir, name), "rb").read()
        )
    assert [r["file"] for r in index["vocab_files"]["files"]] == sorted(os.listdir(vocab_dir))
    # Concat rows are full but for the last piece of each 128-document group (objectives §5.1).
    assert 0 < 1 - train["input_tokens"] / (train["rows"] * INPUTS_LENGTH) < 0.01


def test_pyarrow_stream_and_memory_map(concat_set, vocab):
    path = os.path.join(concat_set, "train-00001-of-00003.arrow")
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_stream(source)
        meta = json.loads(reader.schema.metadata[b"c4forge"])
        batches = list(reader)
    assert meta["split"] == "train" and meta["shard_index"] == 1 and meta["num_shards"] == 3
    assert meta["vocab_sha256"] == vocab.sha256
    assert all(b.num_rows == 256 for b in batches[:-1]) and 0 < batches[-1].num_rows <= 256
    inputs = np.concatenate(
        [b.column("inputs").flatten().to_numpy().reshape(-1, INPUTS_LENGTH) for b in batches]
    )
    targets = np.concatenate(
        [b.column("targets").flatten().to_numpy().reshape(-1, 29) for b in batches]
    )
    v = vocab.vocab_size
    for row_in, row_tg in zip(inputs, targets):
        n_in, n_tg = int(np.count_nonzero(row_in)), int(np.count_nonzero(row_tg))
        assert row_in[n_in - 1] == 1 and not row_in[n_in:].any()  # EOS, then padding only
        assert row_tg[n_tg - 1] == 1 and row_tg[0] == v - 1  # targets start with <extra_id_0>
        sentinels = row_in[row_in >= v - 100]
        assert sentinels.tolist() == list(range(v - 1, v - 1 - len(sentinels), -1))
    assert inputs.max() < v


def test_hf_datasets_reads_the_shards(concat_set, tmp_path):
    from datasets import Dataset

    ds = hf_splits(concat_set, str(tmp_path / "hf"))
    index = json.load(open(os.path.join(concat_set, "index.json")))
    assert ds["train"].num_rows == index["splits"]["train"]["rows"]
    assert ds["validation"].num_rows == index["splits"]["validation"]["rows"]
    one = Dataset.from_file(os.path.join(concat_set, "train-00000-of-00003.arrow"))
    assert one.features["inputs"].length == INPUTS_LENGTH
    rows = S.ShardSet.open(concat_set).read_rows("train")
    assert one[3]["targets"] == rows["targets"][3].tolist()


def test_rows_decode_back_to_the_source_documents(concat_set, vocab, docs):
    """inputs + targets with sentinels substituted = a contiguous run of a clean shard's tokens."""
    streams = [
        np.concatenate(
            [np.asarray(t, np.int32) for t in all_tokens(os.path.join(docs, name), vocab)]
        )
        for name in TRAIN_FILES
    ]
    rows = S.ShardSet.open(concat_set, vocab=vocab).read_rows("train")
    rng = np.random.default_rng(0)
    for r in rng.choice(len(rows["inputs"]), size=40, replace=False):
        piece = reconstruct(rows["inputs"][r], rows["targets"][r], vocab.vocab_size)
        assert 1 <= len(piece) <= 141
        assert any(contains(s, piece) for s in streams), f"row {r} is not from the documents"
    # And as text: a full row decodes to real words of the corpus.
    piece = reconstruct(rows["inputs"][0], rows["targets"][0], vocab.vocab_size)
    text = vocab.decode(piece)
    assert len(text) > 100 and "<extra_id" not in text


def test_per_document_rows_and_rows_per_shard(packed_set, vocab, docs):
    shards = S.ShardSet.open(packed_set, vocab=vocab, inputs_length=INPUTS_LENGTH)
    index = shards.index
    train = index["splits"]["train"]
    assert train["num_shards"] == -(-train["rows"] // 700)  # --rows-per-shard 700
    assert index["token_dtype"] == "int32" and index["arrow"]["compression"] == "lz4"
    assert index["objective"]["pack_window"] == 256
    with pa.memory_map(shards.split_shards("train")[0][0]) as source:
        schema = pa.ipc.open_stream(source).schema
    assert schema.field("inputs").type.value_type == pa.int32()
    assert schema.field("inputs_segment_ids").type.value_type == pa.int32()
    assert shards.columns == PACKED_COLUMNS
    rows = shards.read_rows("validation")
    texts = [
        vocab.decode(vocab.encode(d["text"]))
        for d in iter_documents(os.path.join(docs, VALIDATION_FILE))
    ]
    checked = 0
    for r in range(0, len(rows["inputs"]), 7):
        seg_in, seg_tg = rows["inputs_segment_ids"][r], rows["targets_segment_ids"][r]
        assert ((rows["inputs"][r] != 0) == (seg_in != 0)).all()
        for s in range(1, int(seg_in.max()) + 1):
            ins = rows["inputs"][r][seg_in == s]
            tgs = rows["targets"][r][seg_tg == s]
            assert (rows["inputs_positions"][r][seg_in == s] == np.arange(len(ins))).all()
            piece = reconstruct(np.append(ins, 0), np.append(tgs, 0), vocab.vocab_size)
            text = vocab.decode(piece).strip()
            # Documents are never mixed: every segment is a substring of ONE document.
            assert any(text in t for t in texts), text[:80]
            checked += 1
    assert checked > 50
    pad = S.padding_fraction(train, INPUTS_LENGTH)
    concat_like_unpacked = 1 - train["input_tokens"] / (
        index["stats"]["train"]["examples"] * INPUTS_LENGTH
    )
    assert pad < concat_like_unpacked  # packing filled rows that single examples would not


def test_identical_bytes_across_runs_and_worker_counts(concat_set, work, docs, vocab_dir):
    again = str(work / "concat-2workers")
    assert shards(docs, vocab_dir, again, "--workers", "2") == 0
    assert files_of(again) == files_of(concat_set)


def test_rerun_keeps_finished_shards_and_rebuilds_missing_ones(concat_set, work, docs, vocab_dir):
    d = str(work / "resume")
    shutil.copytree(concat_set, d)
    reference = files_of(concat_set)
    before = mtimes(d)
    # 1. A complete set: nothing is rewritten.
    assert shards(docs, vocab_dir, d, "--workers", "1") == 0
    assert mtimes(d) == before
    # 2. Half-written: index.json not yet written, one shard and its progress record missing.
    index = json.load(open(os.path.join(d, "index.json")))
    os.remove(os.path.join(d, "index.json"))
    from c4forge.shards.output import BUILD_RECORD

    progress = S.Progress(d)
    for block in index["splits"].values():
        for rec in block["shards"]:
            progress.save({**rec, "dataset_fingerprint": index["dataset_fingerprint"]})
    build = {
        "dataset_fingerprint": index["dataset_fingerprint"],
        "arrow": index["arrow"],
        "num_shards": {"train": 3, "validation": 2},
    }
    write_json(os.path.join(d, "_progress", BUILD_RECORD), build)
    victim = "train-00001-of-00003.arrow"
    os.remove(os.path.join(d, victim))
    os.remove(progress.record_path(victim))
    assert shards(docs, vocab_dir, d, "--workers", "1") == 0
    after = mtimes(d)
    assert files_of(d) == reference
    changed = {n for n in after if n not in before or after[n] != before[n]}
    assert changed == {victim, "index.json"}
    assert not os.path.exists(os.path.join(d, "_progress"))
    # 3. A finished set whose shard was truncated later: only that shard is rebuilt.
    path = os.path.join(d, "validation-00001-of-00002.arrow")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    before = mtimes(d)
    assert shards(docs, vocab_dir, d, "--workers", "1") == 0
    assert files_of(d) == reference
    assert {n for n, t in mtimes(d).items() if t != before[n]} == {
        "validation-00001-of-00002.arrow",
        "index.json",
    }


def test_other_settings_in_existing_folder_need_overwrite(
    concat_set, work, docs, vocab_dir, capsys
):
    d = str(work / "other-seed")
    shutil.copytree(concat_set, d)
    assert shards(docs, vocab_dir, d, "--seed", "1", "--workers", "1") == 2
    err = capsys.readouterr().err
    assert "pass --overwrite" in err and "Traceback" not in err
    assert shards(docs, vocab_dir, d, "--seed", "1", "--overwrite", "--workers", "1") == 0
    index = json.load(open(os.path.join(d, "index.json")))
    assert index["seed"] == 1
    assert (
        files_of(d)["train-00000-of-00003.arrow"]
        != files_of(concat_set)["train-00000-of-00003.arrow"]
    )
    # The job function raises the typed error (the CLI turns it into exit 2).
    from c4forge.shards.driver import run_job

    with pytest.raises(OutputExistsError):
        run_job(_job(docs, vocab_dir, d))


def _job(docs, vocab_dir, out, **kw):
    """The typed job the CLI builds for these options (one in-process worker, quiet)."""
    from c4forge.cli import build_parser
    from c4forge.shards.cli import job_from_args

    argv = shards_argv(
        docs, vocab_dir, out, "--workers", "1", "--quiet", inputs_length=INPUTS_LENGTH, **kw
    )
    args, extra = build_parser().parse_known_args(argv)
    return job_from_args(args, extra)


# ----------------------------------------------------------------------------- verification


def test_verify_command_and_truncation(concat_set, work, vocab_dir, capsys):
    assert main(["shards", "verify", concat_set, "--vocab", vocab_dir, "--quiet"]) == 0
    d = str(work / "corrupt")
    shutil.copytree(concat_set, d)
    path = os.path.join(d, "train-00002-of-00003.arrow")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x5A  # same size: only the checksum can see it
    open(path, "wb").write(bytes(data))
    assert main(["shards", "verify", d, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert path in err and "sha256 expected" in err and "Traceback" not in err
    open(path, "wb").write(bytes(data[:1000]))  # truncated
    assert main(["shards", "verify", d, "--quiet"]) == 2
    assert "size expected" in capsys.readouterr().err


@pytest.fixture(scope="module")
def other_vocab(work, docs):
    """A second real vocabulary (built outside capsys: SentencePiece's log redirect needs a
    real stderr file descriptor)."""
    other_dir = str(work / "vocab-other")
    return other_dir, train_vocab(other_dir, docs, vocab_size=500, sample_chars=300_000)


def test_other_vocabulary_is_refused_with_both_hashes(concat_set, vocab, other_vocab, capsys):
    other_dir, other = other_vocab
    assert main(["shards", "verify", concat_set, "--vocab", other_dir]) == 2
    err = capsys.readouterr().err
    expected = (
        f"{os.path.join(concat_set, 'index.json')} was built with vocabulary {vocab.sha256} "
        f"({vocab.vocab_size} ids); this run uses {other['sha256']} ({other['vocab_size']} ids)"
    )
    assert expected in err


# ----------------------------------------------------------------------------- bad input


def test_missing_and_empty_docs_folder(work, vocab_dir, capsys):
    missing = str(work / "no-such-folder")
    assert main(["shards", missing, "--vocab", vocab_dir, "--output", str(work / "o1")]) == 2
    assert "does not exist" in capsys.readouterr().err
    empty = work / "empty-docs"
    empty.mkdir()
    (empty / "README").write_text("not a shard")
    assert main(["shards", str(empty), "--vocab", vocab_dir, "--output", str(work / "o2")]) == 2
    assert "no c4-train" in capsys.readouterr().err
    assert not os.path.exists(work / "o2")


def test_documents_without_text(work, vocab_dir):
    d = work / "blank-docs"
    d.mkdir()
    blank = [
        {"text": "", "date": "2019-04-25T12:57:54Z", "url": f"https://e.com/{i}"} for i in range(5)
    ]
    write_c4_file(str(d / "c4-train.00000-of-00001.json.gz"), blank)
    from c4forge.shards.driver import run_job

    job = _job(str(d), vocab_dir, str(work / "o3"), num_shards=1)
    with pytest.raises(
        InputError, match="no training rows: 5 train documents read, 5 of them empty"
    ):
        run_job(job)
    assert not os.path.exists(work / "o3" / "index.json")
    # A record with no `text` field is not a C4 file: refused with file and line.
    bad = work / "bad-docs"
    bad.mkdir()
    with gzip.open(bad / "c4-train.00000-of-00001.json.gz", "wt") as f:
        f.write('{"url": "https://e.com/", "timestamp": "x"}\n')
    job = _job(str(bad), vocab_dir, str(work / "o4"), num_shards=1)
    with pytest.raises(
        InputError, match=r"c4-train.00000-of-00001.json.gz:1: record has no string 'text'"
    ):
        run_job(job)


def test_config_errors_come_before_any_work(work, docs, vocab_dir, capsys):
    out = work / "never"
    argv = ["shards", docs, "--vocab", vocab_dir, "--output", str(out)]
    assert main([*argv, "--inputs-length", "2048"]) == 2  # 114 spans > 100 sentinels
    assert "100 sentinels" in capsys.readouterr().err
    assert main([*argv, "--num-shards", "0"]) == 2
    assert main([*argv, "--num-shards", "4", "--rows-per-shard", "10"]) == 2
    assert main([*argv, "--dupe-factor", "3"]) == 2  # a bert_mlm_nsp option
    assert main([*argv, "--objective", "bert_mlm_nsp", "--targets-length", "20"]) == 2
    capsys.readouterr()
    assert main([*argv, "--seeds", "3"]) == 2  # misspelt: neither ours nor Beam's
    err = capsys.readouterr().err
    assert (
        "unknown option '--seeds'" in err
        and "did you mean --seed?" in err
        and "Traceback" not in err
    )
    assert not out.exists()
    with pytest.raises(ConfigError):
        _job(docs, vocab_dir, str(out), batch_rows=0)
