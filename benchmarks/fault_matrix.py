"""The fault matrix: every engine × every fault a cluster inflicts, on a benchmark corpus.

Why: Spark and Dataflow retry a task or bundle after its worker dies, and may run one twice
(speculation, a bundle re-run); the local engine re-runs the task of a killed worker. Each
must leave exactly the bytes of a run without faults: no document lost, none duplicated, no
torn file. The faults are injected through the writers' test hook (``c4forge.faults``), so
the real engines really retry:

* ``kill``: the worker writing a chunk's scratch pages and the one writing a train shard
  are SIGKILLed (as the OOM killer does) with their bytes written but not committed;
* ``raise``: every side-effecting write of the workers (chunk files, sorted runs, shards)
  fails once mid-write (an ``OSError``);
* ``duplicate``: every task (local), element (Beam) or partition (Spark) runs twice, one
  attempt's output kept: a speculative duplicate.

A run that fails is run again with ``--resume`` and no fault (the row says so). Columns:
exit code(s), documents lost and duplicated (multisets of ``(url, text)`` against the
engine's fault-free run), identical (every output file byte-equal, stats.json included),
debris (temporary files left by killed writers), faults fired, wall seconds.

Usage: ``python benchmarks/fault_matrix.py [--pages 20000] [--engines local,beam,spark]
[--faults kill,raise,duplicate] [--workers 2] [--json out.json]``
"""

from __future__ import annotations

import argparse
import collections
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

FAULTS = {
    "kill": "chunk-*.pages.gz:kill,c4-train*:kill",
    "raise": "chunk-*:raise:each,c4-train*:raise:each",
    "duplicate": "*:duplicate",
}


def _load_corpus_module():
    spec = importlib.util.spec_from_file_location("c4forge_bench_corpus", _HERE / "corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def engine_args(engine: str, workers: int) -> list[str]:
    extra = ["--engine", engine, "--workers", str(workers)]
    if engine == "spark":
        extra += ["--master", f"local[{workers}]"]
    return extra


def clean(
    corpus: Path, out: Path, extra: list[str], env: dict[str, str], timeout: float
) -> tuple[int | str, str]:
    """``c4forge clean``'s exit code and stderr; ``"hang"`` when it ran past ``timeout``
    (its whole process group is killed then: a hang is a result of the matrix too)."""
    import signal

    cmd = [sys.executable, "-m", "c4forge", "clean", str(corpus), "-o", str(out), "--quiet"]
    proc = subprocess.Popen(
        [*cmd, *extra],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        return "hang", err
    return proc.returncode, err


def documents(out: Path) -> collections.Counter:
    """The multiset of ``(url, text)`` of every output shard (JSON lines, gzip)."""
    docs: collections.Counter = collections.Counter()
    for p in sorted(out.glob("c4-*.json.gz")):
        if ".tmp-" in p.name:
            continue
        with gzip.open(p, "rt", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                docs[(d["url"], d["text"])] += 1
    return docs


def files(out: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(out.iterdir())
        if p.is_file() and ".tmp-" not in p.name
    }


def debris(out: Path) -> int:
    return sum(1 for p in out.rglob("*") if ".tmp-" in p.name)


def run_case(
    corpus: Path,
    tmp: Path,
    engine: str,
    fault: str,
    workers: int,
    ref: Path | None,
    timeout: float = 1800,
) -> dict:
    out = tmp / f"{engine}-{fault}"
    markers = tmp / f"markers-{engine}-{fault}"
    env = dict(os.environ, C4FORGE_CHUNK_FILES="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if fault != "none":
        env.update(C4FORGE_FAULT=FAULTS[fault], C4FORGE_FAULT_MARKERS=str(markers))
    extra = engine_args(engine, workers)
    started = time.monotonic()
    code, err = clean(corpus, out, extra, env, timeout)
    exits = [code]
    if code != 0 and fault != "none":  # what a user does next: --resume, without the fault
        env.pop("C4FORGE_FAULT")
        code, err = clean(corpus, out, [*extra, "--resume"], env, timeout)
        exits.append(code)
    wall = time.monotonic() - started
    row = {
        "engine": engine,
        "fault": fault,
        "exit": "→".join(map(str, exits)),
        "fired": len(os.listdir(markers)) if markers.is_dir() else 0,
        "wall_s": round(wall, 1),
        "error": err.strip().splitlines()[-1] if code != 0 and err.strip() else "",
    }
    if code != 0:
        return row
    docs = documents(out)
    row["documents"] = sum(docs.values())
    row["debris"] = debris(out)
    if ref is not None:
        want = documents(ref)
        row["lost"] = sum((want - docs).values())
        row["duplicated"] = sum((docs - want).values())
        row["identical"] = files(out) == files(ref)
    return row


def table(rows: list[dict]) -> str:
    head = [
        "engine",
        "fault",
        "exit",
        "fired",
        "documents",
        "lost",
        "duplicated",
        "identical",
        "debris",
        "wall_s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = []
        for h in head:
            v = r.get(h, "—")
            cells.append(("yes" if v else "NO") if isinstance(v, bool) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--files", type=int, default=20, help="WET files (one chunk, one task each)")
    ap.add_argument("--engines", default="local,beam,spark")
    ap.add_argument("--faults", default="kill,raise,duplicate")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run (a hang)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--keep", action="store_true", help="keep the outputs (printed folder)")
    args = ap.parse_args(argv)
    corpus_mod = _load_corpus_module()
    corpus = corpus_mod.default_out(args.pages, 0).with_name(
        f"corpus-s0-n{args.pages}-f{args.files}"
    )
    corpus_mod.build(corpus, args.pages, 0, args.files, [])
    tmp = Path(tempfile.mkdtemp(prefix="c4forge-faults-"))
    rows: list[dict] = []
    try:
        for engine in args.engines.split(","):
            ref = run_case(corpus, tmp, engine, "none", args.workers, None, args.timeout)
            rows.append(ref)
            print(json.dumps(ref, ensure_ascii=False), flush=True)
            ref_out = tmp / f"{engine}-none" if ref["exit"] == "0" else None
            for fault in args.faults.split(","):
                row = run_case(corpus, tmp, engine, fault, args.workers, ref_out, args.timeout)
                rows.append(row)
                print(json.dumps(row, ensure_ascii=False), flush=True)
    finally:
        if args.keep:
            print(f"outputs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.pages:,} pages in {args.files} files, {args.workers} workers\n")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    bad = [r for r in rows if r["fault"] != "none" and not r.get("identical")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
