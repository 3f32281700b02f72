"""`c4forge vocab`: real SentencePiece training on the bundled real C4 sample (objectives.md §1, §6.10)."""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import pickle
import shutil

import numpy as np
import pytest
import sentencepiece as spm
from objective_references import rows_of
from train_fixtures import VOCABULARY_KEYS

from c4forge.corpus import clean_docs
from c4forge.errors import ConfigError, InputError, OutputExistsError, VerificationError
from c4forge.objectives import make_config, shard_examples
from c4forge.vocab import cli as vocab_cli
from c4forge.vocab.train import Source, build_vocab, parse_mix, sample_lines
from c4forge.vocab.vocab import Vocabulary, add_extra_ids

SAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "c4forge", "data", "sample", "c4-sample.00000-of-00001.json.gz"
)
PIECES = 2000
SAMPLE_CHARS = 400_000  # about 19 % of the sample: training takes a few seconds


def read_sample() -> list[dict]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def write_shard(path: str, docs: list[dict]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(
                json.dumps(
                    {"text": d["text"], "timestamp": d.get("date", ""), "url": d["url"]},
                    ensure_ascii=False,
                )
                + "\n"
            )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    """The real sample as a 2-shard train split (even docs → shard 0, odd → shard 1)."""
    d = tmp_path_factory.mktemp("clean")
    docs = read_sample()
    write_shard(str(d / "c4-train.00000-of-00002.json.gz"), docs[0::2])
    write_shard(str(d / "c4-train.00001-of-00002.json.gz"), docs[1::2])
    write_shard(str(d / "c4-validation.00000-of-00001.json.gz"), docs[:5])
    return str(d)


@pytest.fixture(scope="module")
def vocab_dir(corpus, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("vocab") / "v")
    build_vocab(
        [Source("en", corpus)], out, vocab_size=PIECES, sample_chars=SAMPLE_CHARS, progress=False
    )
    return out


def test_files_and_descriptor(vocab_dir):
    assert sorted(os.listdir(vocab_dir)) == [
        "sentencepiece.extra_ids.model",
        "sentencepiece.model",
        "vocab.json",
    ]
    desc = json.load(open(os.path.join(vocab_dir, "vocab.json")))
    plain = open(os.path.join(vocab_dir, "sentencepiece.model"), "rb").read()
    assert desc["format"] == "c4forge.vocab" and desc["format_version"] == 1
    assert desc["sha256"] == hashlib.sha256(plain).hexdigest()
    assert desc["num_pieces"] == PIECES and desc["extra_ids"] == 100
    assert desc["vocab_size"] == PIECES + 100 and desc["embedding_size"] == 2176  # 2100 → ×128
    assert (desc["pad_id"], desc["eos_id"], desc["unk_id"], desc["bos_id"]) == (0, 1, 2, -1)
    t = desc["trainer"]
    assert (
        t["model_type"] == "unigram"
        and t["num_threads"] == 16
        and t["character_coverage"] == 0.9995
    )
    assert (
        t["normalization_rule_name"] == "nmt_nfkc"
        and t["input_sentence_size"] == desc["sample"]["lines"]
    )
    s = desc["sample"]
    assert (
        0 < s["characters"] <= s["candidate_chars"] and s["documents"] == 1000 and s["files"] == 2
    )
    # the sample is about sample_chars / total_chars of the lines
    assert 0.6 * SAMPLE_CHARS < s["characters"] < 1.4 * SAMPLE_CHARS
    assert desc["source"]["sources"][0]["files"] == [
        "c4-train.00000-of-00002.json.gz",
        "c4-train.00001-of-00002.json.gz",
    ]
    # the trained model itself carries T5's conventions
    sp = spm.SentencePieceProcessor(model_file=os.path.join(vocab_dir, "sentencepiece.model"))
    assert [sp.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
    assert sp.bos_id() == -1 and sp.piece_to_id("<s>") == sp.unk_id() == 2


def test_extra_ids_model(vocab_dir):
    v = PIECES + 100
    sp = spm.SentencePieceProcessor(
        model_file=os.path.join(vocab_dir, "sentencepiece.extra_ids.model")
    )
    assert sp.get_piece_size() == v
    assert sp.piece_to_id("\u2581<extra_id_0>") == v - 1
    assert sp.piece_to_id("\u2581<extra_id_99>") == v - 100
    assert sp.id_to_piece(v - 1 - 37) == "\u2581<extra_id_37>"
    # seqio behaviour: sentinel text at a word start becomes the id; inside a word it does not
    ids = sp.encode("The <extra_id_0> walks in <extra_id_1> park")
    assert v - 1 in ids and v - 2 in ids and ids.index(v - 1) < ids.index(v - 2)
    assert v - 1 not in sp.encode("jel<extra_id_0>")
    # the first PIECES pieces are the trained model's, untouched
    plain = spm.SentencePieceProcessor(model_file=os.path.join(vocab_dir, "sentencepiece.model"))
    assert all(plain.id_to_piece(i) == sp.id_to_piece(i) for i in range(0, PIECES, 97))


def test_extra_ids_bytes_match_modelproto(vocab_dir):
    pb = pytest.importorskip("transformers.utils.sentencepiece_model_pb2_new")
    plain = open(os.path.join(vocab_dir, "sentencepiece.model"), "rb").read()
    m = pb.ModelProto()
    m.ParseFromString(plain)
    for k in reversed(range(100)):
        m.pieces.add(
            piece=f"\u2581<extra_id_{k}>", score=0.0, type=pb.ModelProto.SentencePiece.USER_DEFINED
        )
    assert add_extra_ids(plain, 100) == m.SerializeToString()
    assert (
        open(os.path.join(vocab_dir, "sentencepiece.extra_ids.model"), "rb").read()
        == m.SerializeToString()
    )


def test_vocabulary_class(vocab_dir):
    v = Vocabulary.load(vocab_dir)
    assert (v.num_pieces, v.vocab_size, v.embedding_size) == (PIECES, PIECES + 100, 2176)
    assert (v.pad_id, v.eos_id, v.unk_id, v.bos_id) == (0, 1, 2, -1)
    assert v.sentinel(0) == v.vocab_size - 1 and v.sentinel(99) == v.vocab_size - 100
    with pytest.raises(ConfigError):
        v.sentinel(100)
    desc = json.load(open(os.path.join(vocab_dir, "vocab.json")))
    assert v.sha256 == desc["sha256"]
    assert v.descriptor() == {k: desc[k] for k in VOCABULARY_KEYS}
    text = "Beginners BBQ Class Taking Place in Missoula!"
    ids = v.encode(text)
    assert 1 not in ids and 0 not in ids and max(ids) < PIECES
    assert v.decode(ids) == text
    assert v.decode(ids + [v.sentinel(0), 1, 0, 0]) == text + "<extra_id_0>"
    assert v.encode_batch([text, "", text]) == [ids, [], ids]
    arrays = v.encode_arrays([text, "", text])  # numpy fast path of the shard job
    assert [a.dtype for a in arrays] == [np.dtype(np.int32)] * 3
    assert [a.tolist() for a in arrays] == [ids, [], ids]
    old_sp = pickle.loads(pickle.dumps(v))
    old_sp._numpy_out = False  # the conversion fallback for sentencepiece without numpy output
    assert [a.tolist() for a in old_sp.encode_arrays([text, ""])] == [ids, []]
    assert v.encode("<extra_id_0>") != [v.sentinel(0)]  # data encoding never yields sentinels
    assert v.encode_with_sentinels("<extra_id_0>")[-1] == v.sentinel(0)
    assert v.model_path.endswith("sentencepiece.extra_ids.model")
    assert v.plain_model_path.endswith("sentencepiece.model")
    v2 = pickle.loads(pickle.dumps(v))
    assert v2.encode(text) == ids and v2.sha256 == v.sha256
    # an external plain model (like T5's spiece.model) plus extra ids
    ext = Vocabulary.load(v.plain_model_path, extra_ids=100)
    assert ext.vocab_size == v.vocab_size and ext.sha256 == v.sha256 and ext.encode(text) == ids


def test_tampered_model_is_refused(vocab_dir, tmp_path):
    bad = str(tmp_path / "bad")
    shutil.copytree(vocab_dir, bad)
    with open(os.path.join(bad, "sentencepiece.model"), "ab") as f:
        f.write(b"\x00")
    with pytest.raises(VerificationError, match="sha256"):
        Vocabulary.load(bad)
    os.remove(os.path.join(bad, "vocab.json"))
    with pytest.raises(InputError, match="vocab.json"):
        Vocabulary.load(bad)
    with pytest.raises(InputError, match="does not exist"):
        Vocabulary.load(str(tmp_path / "nothing"))


def test_rerun_is_byte_identical_and_order_independent(corpus, vocab_dir, tmp_path):
    """Same sample, order and num_threads → the same model, even from differently sharded files."""
    other = tmp_path / "reshard"
    other.mkdir()
    docs = read_sample()
    # three shards, different membership and order: the line sample and its order do not change
    for i in range(3):
        write_shard(str(other / f"c4-train.{i:05d}-of-00003.json.gz"), docs[2 - i :: 3][::-1])
    out = str(tmp_path / "v2")
    build_vocab(
        [Source("en", str(other))],
        out,
        vocab_size=PIECES,
        sample_chars=SAMPLE_CHARS,
        progress=False,
    )
    a = open(os.path.join(vocab_dir, "sentencepiece.model"), "rb").read()
    b = open(os.path.join(out, "sentencepiece.model"), "rb").read()
    assert a == b
    assert (
        open(os.path.join(vocab_dir, "sentencepiece.extra_ids.model"), "rb").read()
        == open(os.path.join(out, "sentencepiece.extra_ids.model"), "rb").read()
    )


def test_sampling_is_deterministic_and_counts(corpus, tmp_path):
    lines1, s1, _ = sample_lines(
        [Source("en", corpus)], seed=0, sample_chars=500_000, progress=False
    )
    lines2, _, _ = sample_lines(
        [Source("en", corpus)], seed=0, sample_chars=500_000, progress=False
    )
    lines3, _, _ = sample_lines(
        [Source("en", corpus)], seed=1, sample_chars=500_000, progress=False
    )
    assert lines1 == lines2 and lines1 != lines3
    assert s1.lines == len(lines1) and s1.lines_too_long == 0
    # --sample-sentences: a line budget = the lines with the smallest hashes, in hash order,
    # alone (no character budget) or on top of the character sample.
    every, all_stats, _ = sample_lines(
        [Source("en", corpus)], seed=0, sample_chars=None, progress=False
    )
    assert all_stats.lines == all_stats.candidate_lines > len(lines1)
    first, st, _ = sample_lines(
        [Source("en", corpus)], seed=0, sample_chars=None, sample_sentences=300, progress=False
    )
    assert first == every[:300] and st.lines == 300
    both, _, _ = sample_lines(
        [Source("en", corpus)], seed=0, sample_chars=500_000, sample_sentences=50, progress=False
    )
    assert both == lines1[:50]
    # a line over 4192 bytes is counted, not trained on; clean stats.json supplies total_chars
    d = tmp_path / "long"
    d.mkdir()
    write_shard(
        str(d / "c4-train.00000-of-00001.json.gz"),
        [
            {"text": "short line here\n" + "x" * 5000 + "\nanother line", "url": "u1"},
            {"text": "", "url": "u2"},
        ],
    )
    (d / "stats.json").write_text(
        json.dumps(
            {
                "format": "c4forge.clean.stats",
                "format_version": 1,
                "outputs": {"train": {"documents": 2, "characters": 5028}},
            }
        )
    )
    lines, s, desc = sample_lines(
        [Source("en", str(d))], seed=0, sample_chars=10**9, progress=False
    )
    assert (
        s.lines_too_long == 1
        and s.documents_empty == 1
        and sorted(lines) == ["another line", "short line here"]
    )
    src = desc["sources"][0]
    assert (
        src["total_chars"] == 5028 and not src["total_chars_counted"] and src["clean_stats_sha256"]
    )


def test_mix_syntax_and_shares(corpus, tmp_path):
    de = tmp_path / "de"
    de.mkdir()
    docs = read_sample()
    write_shard(
        str(de / "c4-train.00000-of-00001.json.gz"),
        [{"text": d["text"], "url": "de:" + d["url"]} for d in docs],
    )
    sources = parse_mix(f"en=3,de=1:{de}", corpus)
    assert [(s.language, s.weight) for s in sources] == [("en", 3.0), ("de", 1.0)]
    assert sources[0].directory == corpus and sources[1].directory == str(de)
    _, stats, _ = sample_lines(sources, seed=0, sample_chars=800_000, progress=False)
    en, de_chars = stats.per_source["en"]["characters"], stats.per_source["de"]["characters"]
    assert 2.0 < en / de_chars < 4.5  # 3 : 1
    for bad in ("en", "en=x", "en=0", "en=1,en=2", "de=1"):
        with pytest.raises(ConfigError):
            parse_mix(bad, None if bad == "de=1" else corpus)


def test_bad_inputs(tmp_path, corpus):
    out = str(tmp_path / "out")
    with pytest.raises(InputError, match="does not exist"):
        build_vocab([Source("en", str(tmp_path / "missing"))], out, vocab_size=100, progress=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no train documents"):
        build_vocab([Source("en", str(empty))], out, vocab_size=100, progress=False)
    blank = tmp_path / "blank"
    blank.mkdir()
    write_shard(
        str(blank / "c4-train.00000-of-00001.json.gz"),
        [{"text": "", "url": "a"}, {"text": "\n", "url": "b"}],
    )
    with pytest.raises(InputError, match="no usable text"):
        build_vocab([Source("en", str(blank))], out, vocab_size=100, progress=False)
    notext = tmp_path / "notext"
    notext.mkdir()
    with gzip.open(notext / "c4-train.00000-of-00001.json.gz", "wt") as f:
        f.write('{"url": "x"}\n')
    with pytest.raises(InputError, match="no string 'text'"):
        build_vocab([Source("en", str(notext))], out, vocab_size=100, progress=False)
    with pytest.raises(ConfigError, match="too small.*--vocab-size \\d+ or more"):
        build_vocab(
            [Source("en", corpus)], out, vocab_size=40, sample_chars=100_000, progress=False
        )
    with pytest.raises(ConfigError, match="no room"):
        build_vocab([Source("en", corpus)], out, vocab_size=200, byte_fallback=True, progress=False)
    with pytest.raises(ConfigError, match="no room"):
        build_vocab([Source("en", corpus)], out, vocab_size=3, progress=False)
    with pytest.raises(ConfigError, match="too large.*--vocab-size \\d+"):
        build_vocab(
            [Source("en", corpus)], out, vocab_size=50000, sample_chars=200_000, progress=False
        )
    assert not os.path.exists(os.path.join(out, "vocab.json"))


def test_cli_and_output_exists(corpus, vocab_dir, capsys, tmp_path):
    parser = argparse.ArgumentParser()
    vocab_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["vocab", corpus, "--output", vocab_dir, "--vocab-size", "1000"])
    with pytest.raises(OutputExistsError):
        vocab_cli.run(args, [])
    out = str(tmp_path / "small")
    args = parser.parse_args(
        [
            "vocab",
            corpus,
            "-o",
            out,
            "--vocab-size",
            "1000",
            "--sample-chars",
            "300000",
            "--extra-ids",
            "10",
            "--byte-fallback",
        ]
    )
    assert vocab_cli.run(args, []) == 0
    printed = capsys.readouterr().out
    assert "pieces 1,000 + extra ids 10 = V 1,010" in printed and "<extra_id_0> = 1009" in printed
    v = Vocabulary.load(os.path.join(out, "vocab.json"))
    assert v.sentinel(9) == 1000
    # byte fallback: a character outside the sample becomes UTF-8 byte pieces, not <unk>
    ids = v.encode("\u6f22")
    assert v.unk_id not in ids and [v.id_to_piece(i) for i in ids][-3:] == [
        "<0xE6>",
        "<0xBC>",
        "<0xA2>",
    ]
    assert json.load(open(os.path.join(out, "vocab.json")))["trainer"]["byte_fallback"] is True
    # without it (the T5 default) the same character is <unk>
    assert Vocabulary.load(vocab_dir).encode("\u6f22")[-1] == 2
    # --sample-sentences alone: a line budget, recorded in vocab.json, no character budget
    out2 = str(tmp_path / "by-lines")
    argv = ["vocab", corpus, "-o", out2, "--vocab-size", "500", "--sample-sentences", "2000"]
    assert vocab_cli.run(parser.parse_args([*argv, "--quiet"]), []) == 0
    sample = json.load(open(os.path.join(out2, "vocab.json")))["sample"]
    assert sample["sample_sentences"] == 2000 and sample["sample_chars"] is None
    assert sample["lines"] == 2000 and sample["lines"] < sample["candidate_lines"]


def test_clean_docs_reader(corpus, tmp_path):
    files = clean_docs.list_clean_shards(corpus, "train")
    assert [os.path.basename(f) for f in files] == [
        "c4-train.00000-of-00002.json.gz",
        "c4-train.00001-of-00002.json.gz",
    ]
    assert len(clean_docs.list_clean_shards(corpus, "validation")) == 1
    assert clean_docs.shard_index(files[1]) == 1
    docs = list(clean_docs.iter_documents(files[0]))
    assert len(docs) == 500 and all(isinstance(d["text"], str) and d["url"] for d in docs)
    assert clean_docs.clean_stats(corpus) is None
    # the AllenAI sample itself (uses "date" instead of "timestamp") reads as is
    assert sum(1 for _ in clean_docs.iter_documents(SAMPLE)) == 1000
    # parquet, as `c4forge clean --format parquet` writes it
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"text": ["a b", "c"], "timestamp": ["t", "t"], "url": ["u", "v"]}),
        tmp_path / "c4-train.00000-of-00001.parquet",
    )
    assert [
        d["text"]
        for d in clean_docs.iter_documents(str(tmp_path / "c4-train.00000-of-00001.parquet"))
    ] == ["a b", "c"]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "c4-train.00000-of-00002.json.gz").write_bytes(b"")
    (bad / "c4-train.00001-of-00003.json.gz").write_bytes(b"")
    with pytest.raises(InputError, match="disagree"):
        clean_docs.list_clean_shards(str(bad), "train")
    trunc = tmp_path / "c4-train.00000-of-00001.json.gz"
    trunc.write_bytes(open(files[0], "rb").read()[:5000])
    with pytest.raises(InputError, match="truncated"):
        list(clean_docs.iter_documents(str(trunc)))


def test_real_text_through_span_corruption(corpus, vocab_dir):
    """Real documents → tokens → examples → rows; a row decodes back to the source text."""
    v = Vocabulary.load(vocab_dir)
    path = clean_docs.list_clean_shards(corpus, "train")[0]
    texts = [d["text"] for d in clean_docs.iter_documents(path)]
    docs = v.encode_batch(texts)
    cfg = make_config(inputs_length=128)
    examples = list(
        shard_examples(docs, clean_shard_index=0, seed=0, config=cfg, vocab_size=v.vocab_size)
    )
    cols, keys = rows_of(examples, cfg)
    assert cols["inputs"].shape[1] == 128 and cols["targets"].shape[1] == cfg.targets_length
    assert int(cols["inputs"].max()) < v.vocab_size
    # first row: substitute sentinels and decode → the start of the first document
    ins, tgs = cols["inputs"][0], cols["targets"][0]
    ins, tgs = ins[: np.flatnonzero(ins == 1)[0]], tgs[: np.flatnonzero(tgs == 1)[0]]
    spans: dict[int, list[int]] = {}
    for t in tgs.tolist():
        if t >= v.num_pieces:
            cur = t
            spans[cur] = []
        else:
            spans[cur].append(t)
    piece = [x for t in ins.tolist() for x in (spans[t] if t >= v.num_pieces else [t])]
    assert piece == docs[0][: cfg.tokens_length]
    assert v.decode(docs[0]).startswith(v.decode(piece))
    # full rows are exactly 128 / targets_length with no padding
    full = cols["inputs"][:, -1] == 1
    assert full.mean() > 0.9
