"""Options that would be silently ignored or silently destructive: ``--runner`` with an engine
that runs no Beam runner is a one-line error; a ``--targets-length`` below what the objective's
targets take is refused (span corruption: every target would be cut) or warned about with the
length that fits. Real ``clean`` of the bundled WET fixture, real ``shards`` of the C4 sample."""

from __future__ import annotations

import os
import re

import pytest
from cli_errors import one_line_error
from shards_fixtures import corpus_fixtures, shards_argv

from c4forge.cli import main
from c4forge.objectives.lengths import span_corruption_lengths
from c4forge.objectives.registry import make_config, short_targets_warning

HERE = os.path.dirname(os.path.abspath(__file__))
WET = os.path.join(HERE, "data", "wet", "whirlwind.warc.wet.gz")

work, docs, vocab_dir, vocab = corpus_fixtures(
    "optionsense", per_train_file=60, total=150, vocab_size=500, sample_chars=200_000
)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_runner_without_the_beam_engine_is_refused(tmp_path, capsys, engine):
    out = tmp_path / "clean"
    argv = ["clean", WET, "-o", str(out), "--engine", engine, "--runner", "DataflowRunner"]
    one_line_error(capsys, argv, f"--runner DataflowRunner is a Beam runner, but --engine {engine}")
    assert not out.exists()


def test_shards_refuses_a_runner_with_the_local_engine(work, docs, vocab_dir, capsys):
    out = work / "never-runner"
    argv = shards_argv(docs, vocab_dir, str(out), "--engine", "local", "--runner", "DirectRunner")
    one_line_error(capsys, argv, "--runner DirectRunner is a Beam runner, but --engine local")
    assert not out.exists()


def test_span_corruption_targets_cut_short_are_refused(work, docs, vocab_dir, capsys):
    out = work / "never-short"
    fits = span_corruption_lengths(64)[1]
    argv = shards_argv(docs, vocab_dir, str(out), "--targets-length", "2", inputs_length=64)
    err = one_line_error(
        capsys, argv, f"--targets-length 2 is shorter than the {fits} tokens span_corruption's"
    )
    assert re.search(rf"{round(100 * (fits - 2) / fits)} % of target tokens would be dropped", err)
    assert f"leave --targets-length out (it is {fits})" in err
    assert not out.exists()


def test_other_objectives_warn_with_the_length_that_fits(work, docs, vocab_dir, capsys):
    out = work / "iid"
    argv = shards_argv(
        docs,
        vocab_dir,
        str(out),
        "--objective",
        "iid_drop",
        "--targets-length",
        "4",
        "--workers",
        "1",
        "--quiet",
        inputs_length=64,
    )
    assert main(argv) == 0
    err = capsys.readouterr().err
    fits = make_config("iid_drop", inputs_length=64).targets_length
    assert f"c4forge shards: warning: --targets-length 4 is below the {fits} tokens" in err
    assert f"(--targets-length {fits} keeps them)" in err
    # the default, or more, is quiet
    assert short_targets_warning(make_config("iid_drop", inputs_length=64)) is None
