"""`c4forge clean CORPUS -o OUT --engine beam --workers 2` past the DirectRunner's memory check:
the check's bytes-per-input-byte is set to PER_BYTE in the run's own process only, and the run is
sampled as ``scale.py`` samples (wall, CPU, peak PSS of the process tree). A watchdog kills the
run if the machine's MemAvailable falls under 1.5 GB (an out-of-memory kill can take other
processes with it). Prints the figures and the documents written as JSON.

Usage: ``python benchmarks/beam_past_check.py CORPUS OUT PER_BYTE``
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402

from c4forge.proctree import available_memory, tree  # noqa: E402

FLOOR = 1.5e9  # bytes of MemAvailable under which the run is killed


def main(corpus: str, out: str, per_byte: float) -> dict:
    wrapper = (
        "import sys; import c4forge.clean.memory_fit as b; "
        f"b.DIRECT_MEMORY_PER_INPUT_BYTE = {per_byte}; "
        "from c4forge.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    cmd = [sys.executable, "-c", wrapper, "clean", corpus, "-o", out, "--engine", "beam"]
    cmd += ["--workers", "2"]
    low: list[int] = []

    def watch() -> None:
        while True:
            time.sleep(1)
            have = available_memory()
            if have is None:
                continue
            low.append(have)
            if have < FLOOR:
                print(f"watchdog: MemAvailable {have / 1e9:.2f} GB: killing the run", flush=True)
                for p in tree(os.getpid())[1:]:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass

    threading.Thread(target=watch, daemon=True).start()
    m = scale.measure(cmd, scale._env())
    res = {k: m[k] for k in ("returncode", "wall", "cpu", "load")}
    res["peak_pss_gib"] = round(m["peak"]["pss"] / 2**30, 3)
    res["min_mem_available_gb"] = round(min(low, default=0) / 1e9, 2)
    stats = Path(out) / "stats.json"
    if stats.exists():
        s = json.loads(stats.read_text())
        res["documents_out"] = s["totals"]["documents_out"]
        res["sha256"] = {
            split: [f["sha256"] for f in block["files"]] for split, block in s["outputs"].items()
        }
    else:
        res["stderr_tail"] = m["stderr"][-3000:]
    return res


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    print(json.dumps(main(sys.argv[1], sys.argv[2], float(sys.argv[3])), indent=1))
