"""`c4forge shards` killed with SIGKILL mid-build, then `--resume`: the same files as a build
that was never interrupted, and how much of the first build the resumed one reused.

Why a script: a test cannot kill a build of realistic size at a chosen point; this one waits
until the rows step has recorded ``--after`` units whose name contains ``--match`` (a clean
shard or a part of one, under ``_progress/_clean/``), kills the whole process group, resumes,
and compares every file (sha256) with ``--reference`` (a finished build of the same command).

    python benchmarks/shards_resume.py CLEAN --vocab V --reference REF_OUT --out OUT \\
        [--after 1] [--match train] -- --workers 2 --engine local
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def digests(directory: Path) -> dict[str, str]:
    out = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(directory))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("clean")
    ap.add_argument("--vocab", required=True)
    ap.add_argument("--reference", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--after", type=int, default=1, help="records to wait for before the kill")
    ap.add_argument("--match", default="train", help="count only records whose name has this")
    args, extra = ap.parse_known_args()  # the rest: `c4forge shards` options (after --)
    args.extra = [x for x in extra if x != "--"]
    shutil.rmtree(args.out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "c4forge",
        "shards",
        args.clean,
        "--vocab",
        args.vocab,
        "-o",
        str(args.out),
        "--quiet",
        *args.extra,
    ]
    started = time.time()
    proc = subprocess.Popen(cmd, start_new_session=True)
    records = args.out / "_progress" / "_clean"
    seen: list[str] = []
    while proc.poll() is None:
        if records.is_dir():
            seen = sorted(n for n in os.listdir(records) if args.match in n)
            if len(seen) >= args.after:
                break
        time.sleep(0.05)
    finished_first = proc.poll() is not None
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = time.time() - started
    loud = [a for a in cmd if a != "--quiet"]  # the resumed run says what it reused
    resumed = subprocess.run([*loud, "--resume"], capture_output=True, text=True)
    got, want = digests(args.out), digests(args.reference)
    report = {
        "command": " ".join(cmd[2:]),
        "killed_after_s": round(killed_at, 1),
        "records_at_kill": seen,
        "finished_before_kill": finished_first,
        "resume_rc": resumed.returncode,
        "resume_line": [ln for ln in resumed.stderr.splitlines() if "--resume" in ln],
        "files": len(want),
        "identical": got == want,
        "differ": sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k)),
    }
    print(json.dumps(report, indent=1))
    return 0 if report["identical"] and not finished_first else 1


if __name__ == "__main__":
    sys.exit(main())
