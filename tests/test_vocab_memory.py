"""`c4forge vocab` says what it will need before the work, refuses a sample that cannot fit, and
its default sample leaves the vocabulary of a small corpus byte for byte as before (real
SentencePiece on the bundled real C4 sample)."""

from __future__ import annotations

import argparse
import gzip
import json
import os

import pytest

from c4forge.errors import ConfigError
from c4forge.proctree import available_memory
from c4forge.vocab import cli as vocab_cli
from c4forge.vocab.memory import Need, check_fits, trainer_peak
from c4forge.vocab.train import (
    DEFAULT_SAMPLE_CHARS,
    Source,
    expected_need,
    sample_lines,
    train_model,
    trainer_options,
)

SAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "c4forge", "data", "sample", "c4-sample.00000-of-00001.json.gz"
)
OLD_DEFAULT_SAMPLE_CHARS = 500_000_000  # the default before the memory-bounded sample


@pytest.fixture(scope="module")
def small_clean(tmp_path_factory) -> str:
    """300 real documents as a clean output with its stats.json (the recorded size)."""
    d = tmp_path_factory.mktemp("clean")
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][:300]
    with gzip.open(d / "c4-train.00000-of-00001.json.gz", "wt", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc["text"], "url": doc["url"], "timestamp": ""}) + "\n")
    chars = sum(len(doc["text"]) for doc in docs)
    (d / "stats.json").write_text(
        json.dumps(
            {
                "format": "c4forge.clean.stats",
                "format_version": 1,
                "outputs": {"train": {"documents": len(docs), "characters": chars}},
            }
        )
    )
    return str(d)


def _vocab(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    vocab_cli.register(parser.add_subparsers(dest="command"))
    return vocab_cli.run(parser.parse_args(["vocab", *argv]), [])


def test_first_line_states_the_need(small_clean, tmp_path, capsys):
    out = str(tmp_path / "v")
    assert _vocab([small_clean, "-o", out, "--vocab-size", "500"]) == 0
    err = capsys.readouterr().err.splitlines()
    total = json.load(open(os.path.join(small_clean, "stats.json")))["outputs"]["train"]
    # the corpus is smaller than the default budget: the estimate is its recorded size, exact
    need = expected_need([Source("en", small_clean)], DEFAULT_SAMPLE_CHARS, None)
    assert need.chars == total["characters"] and not need.bound
    assert err[0].startswith(f"vocab: sample ≈ {total['characters']:,} characters")
    assert f"training needs ≈ {need.peak_bytes / 1e9:.1f} GB of memory" in err[0]
    drawn = json.load(open(os.path.join(out, "vocab.json")))["sample"]
    assert f"sampled {drawn['lines']:,} lines, {drawn['characters']:,} characters" in "\n".join(err)
    # a single file records no size: the figure is the budget's bound
    bound = expected_need([Source("en", SAMPLE)], 10**9, None)
    assert bound.bound and bound.chars == 10**9 and bound.peak_bytes > trainer_peak(10**8, 0)


def test_a_sample_beyond_memory_is_refused_before_any_work(tmp_path, capsys):
    have = available_memory()
    if have is None:
        pytest.skip("no /proc/meminfo: no memory figure to compare with")
    out = tmp_path / "v"
    chars = 10 * have  # ≈ 20 bytes per character: far beyond this machine
    with pytest.raises(
        ConfigError,
        match=r"needs about [\d.]+ GB of memory .* available; use "
        r"--sample-chars [\d,]+ or less",
    ):
        _vocab([SAMPLE, "-o", str(out), "--vocab-size", "500", "--sample-chars", str(chars)])
    assert not out.exists()  # refused before sampling or writing anything
    assert capsys.readouterr().err.startswith(f"vocab: sample at most {chars:,} characters")
    # the figure the refusal suggests fits
    with pytest.raises(ConfigError) as err:
        check_fits(Need(chars, chars // 200), have, what="x")
    fits = int(str(err.value).split("--sample-chars ")[1].split(" ")[0].replace(",", ""))
    check_fits(Need(fits, fits // 200), have, what="x")


def test_default_sample_keeps_the_old_bytes_on_a_small_corpus(small_clean, tmp_path):
    """A corpus under both budgets is sampled whole by the old and the new default: same model
    bytes."""
    out_new, out_old = str(tmp_path / "new"), str(tmp_path / "old")
    assert _vocab([small_clean, "-o", out_new, "--vocab-size", "500", "--quiet"]) == 0
    old_flag = ["--sample-chars", str(OLD_DEFAULT_SAMPLE_CHARS), "--quiet"]
    assert _vocab([small_clean, "-o", out_old, "--vocab-size", "500", *old_flag]) == 0
    new = open(os.path.join(out_new, "sentencepiece.model"), "rb").read()
    old = open(os.path.join(out_old, "sentencepiece.model"), "rb").read()
    assert new == old
    # and both are the model of the whole corpus, trained directly
    lines, _, _ = sample_lines(
        [Source("en", small_clean)], seed=0, sample_chars=None, progress=False
    )
    assert train_model(lines, trainer_options(500, input_sentence_size=len(lines))) == new
