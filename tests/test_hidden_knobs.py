"""No hidden knobs. C4FORGE_LANGDETECT takes a documented value or stops the
job; a fast backend that does not load is an error; stats.json says which backend ran;
objective functions name their parameters (a misspelt one is an error). (Every `train` flag
being a TrainOptions field: tests/test_cliconfig.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from clean_fixtures import DERIVED_WET, REPO

from c4forge.errors import ConfigError
from c4forge.langid import langdetect_fast
from c4forge.langid import langdetect_filter as langid
from c4forge.objectives import functions as fns
from c4forge.objectives.registry import OBJECTIVES


def clean(tmp_path, backend: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    env.pop(langid.BACKEND_ENV, None)
    if backend is not None:
        env[langid.BACKEND_ENV] = backend
    cmd = [sys.executable, "-m", "c4forge", "clean", DERIVED_WET, "-o", str(tmp_path / "out")]
    return subprocess.run(cmd + ["--quiet"], env=env, capture_output=True, text=True, timeout=600)


def test_an_unknown_langdetect_backend_stops_the_job_with_one_line(tmp_path):
    done = clean(tmp_path, "fsat")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "C4FORGE_LANGDETECT='fsat'" in done.stderr
    assert "fast" in done.stderr and "stock" in done.stderr
    assert not (tmp_path / "out" / "stats.json").exists()


@pytest.mark.parametrize("backend", [None, "stock"])
def test_stats_json_records_the_backend_that_ran(tmp_path, backend):
    done = clean(tmp_path, backend)
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["langdetect_backend"] == (backend or "fast")


def test_a_fast_backend_that_does_not_load_is_an_error(monkeypatch):
    class Broken:
        def __init__(self) -> None:
            raise RuntimeError("kernel sum() differs from the interpreter's sum()")

    monkeypatch.setattr(langdetect_fast, "_State", Broken)
    monkeypatch.setattr(langdetect_fast, "_state", None)
    monkeypatch.setattr(langdetect_fast, "_state_error", None)
    monkeypatch.setattr(langid, "_BACKEND", "fast")
    with pytest.raises(ConfigError, match="did not load .*kernel sum.*C4FORGE_LANGDETECT=stock"):
        langid.backend()
    with pytest.raises(ConfigError):
        langid._detect_langs("This is an English sentence about the weather today.")
    monkeypatch.setattr(langid, "_BACKEND", "stock")  # chosen explicitly: stock runs
    assert langid.backend() == "stock"
    assert (
        langid._detect_langs("This is an English sentence about the weather today.")[0][0] == "en"
    )


def test_objective_functions_name_their_parameters():
    for name, spec in OBJECTIVES.items():
        if spec.fn is None:
            continue
        assert set(fns.check_signature(name, spec.fn)) <= set(fns.PIECE_PARAMETERS)
    with pytest.raises(TypeError, match="noise_densty"):  # no catch-all swallows a typo
        fns.prefix_lm(np.arange(3, 20), np.random.default_rng(0), noise_densty=0.3)


def test_a_misspelt_objective_parameter_names_the_objective_and_the_valid_names():
    with pytest.raises(
        ConfigError, match=r"objective span_corruption has no parameter mean_span"
    ) as e:
        fns.objective_kwargs("span_corruption", fns.span_corruption, {"mean_span": 3.0})
    assert "mean_noise_span_length" in str(e.value)
    # Valid parameters the function does not use are not passed to it.
    got = fns.objective_kwargs("deshuffle", fns.deshuffle, {"vocab_size": 9, "mask": "random"})
    assert got == {"vocab_size": 9}

    def sloppy(tokens, rng, *, mean_noise_span_lenght=3.0):
        return tokens, tokens

    with pytest.raises(TypeError, match="mean_noise_span_lenght"):
        fns.check_signature("sloppy", sloppy)
