"""What `c4forge experiment` prints while its stages run: the stage list only (SentencePiece's
trainer log, written by C++ to file descriptor 2, stays out of it, as `c4forge vocab` keeps it
behind --verbose), and a periodic line while a stage runs instead of silence.

The stages run in a child process whose stdout and stderr are real pipes, as on a terminal or
under ``nohup``: the leak only shows there (pytest's own capture has no descriptor 2 to leak to).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

from clean_fixtures import c4_docs, doc_records, wet_bytes

from c4forge.experiments.heartbeat import heartbeat_line, last_step
from tests.conftest import REPO

CONFIG = """
[experiment]
name = "terminal"
base_name = "base"
seeds = [0]

[base.corpus]
inputs = ["{wet}"]

[base.vocab]
size = 300

[base.train]
steps = 10

[base.finetune]
tasks = ["sst2"]
"""

RUN = """
import sys
from c4forge.experiments import runner
from c4forge.experiments.schema import load
from c4forge.experiments.stages import experiment_plan

plan = experiment_plan(load(sys.argv[1]))
stages = [s for s in plan.stages if s.kind in ("clean", "vocab")]
runner.run_stages(sys.argv[2], stages, plan, "cpu", 1)
"""


def test_stage_list_has_no_sentencepiece_log_and_a_running_stage_ticks(tmp_path) -> None:
    docs = c4_docs(0, 150)  # real C4 pages; new URLs so that they land in train (md5 split)
    for i, doc in enumerate(docs):
        doc["url"] = f"https://example.org/terminal/{i}"
    wet = tmp_path / "pages.warc.wet.gz"
    wet.write_bytes(wet_bytes(doc_records(docs)))
    config = tmp_path / "exp.toml"
    config.write_text(textwrap.dedent(CONFIG.format(wet=wet)))
    store = tmp_path / "stages"
    env = {**os.environ, "PYTHONPATH": REPO, "C4FORGE_PROGRESS_SECONDS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(config), str(store)],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown[-3000:]
    for noise in ("trainer_spec", "unigram_model_trainer", "normalizer_spec"):
        assert noise not in shown, f"SentencePiece's log reached the terminal: {noise}"
    assert re.search(r"\[2/2\] vocab +300 pieces .*: done in", shown)
    # a running stage says so each period (here 1 s): elapsed time, one line per tick
    walls = {
        d.name.split("-")[0]: json.loads((d / "stage.json").read_text())["wall_seconds"]
        for d in store.iterdir()
        if (d / "stage.json").is_file()
    }
    assert sorted(walls) == ["clean", "vocab"]
    beats = re.findall(r"\] (clean|vocab) .*: still running, (\d+) s elapsed", proc.stdout)
    if sum(walls.values()) >= 2.5:  # two stages each starting a pool and reading files
        assert beats, proc.stdout
    assert proc.stdout.count(": running") == 2  # the start lines only, as tools count them
    for kind, seconds in beats:
        assert int(seconds) <= walls[kind] + 1


def test_a_training_stage_line_names_its_last_logged_step(tmp_path) -> None:
    """The step comes from the stage's own metrics.jsonl; a line being written is skipped."""
    assert last_step(str(tmp_path)) is None
    metrics = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "loss": 5.0 - s / 100}) for s in (10, 20, 30)]
    metrics.write_text("\n".join(lines) + '\n{"step": 4')  # the last line half written
    line = heartbeat_line("[4/13] pretrain tiny", 45.2, str(tmp_path), 500)
    assert line == "[4/13] pretrain tiny: still running, 45 s elapsed, step 30/500"
    metrics.write_text("")
    assert heartbeat_line("[1/2] clean", 3.0, str(tmp_path), None) == (
        "[1/2] clean: still running, 3 s elapsed"
    )
