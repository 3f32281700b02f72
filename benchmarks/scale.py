"""Crawl scale: the chain clean → vocab → shards, its memory, CPU and shuffle bytes as the corpus
grows.

Corpus: ``benchmarks/corpus.py --unique`` (the bundled real text recombined, every prose line
rebuilt from at least three drawn sentences, so three-sentence spans are unique and dedup
removes little, as on a real crawl); ``--pages`` in ``--files`` WET files.

Stages (``--stages``, default all three), each a subprocess whose process tree is sampled:

* ``clean``: ``python -m c4forge clean CORPUS -o OUT --quiet [config options] --workers W`` per
  configuration and worker count; the first run's output feeds the rest of the chain (clean's
  output is the same on every engine);
* ``vocab``: ``c4forge vocab CLEAN --vocab-size N`` at its default sample (one process; no
  engine or workers);
* ``shards``: ``c4forge shards CLEAN --vocab VOCAB [--engine …] --workers W`` (span corruption
  512/114, the default) per configuration and worker count; where this checkout's shards has no
  ``--engine`` (Beam only), ``default`` is the Beam run and ``spark`` is reported as not run.
  Beside it, SentencePiece's own encode rate (one thread, in this process) on the same text:
  the floor for the stage's tokens per CPU-second.

Measured per run:

* CPU seconds of the whole process tree: ``RUSAGE_CHILDREN``, or the sum of each process's
  last sampled ``utime + stime`` where larger (Spark's JVM and workers are not always reaped);
* peak PSS of the process tree: every 0.5 s the tree under the command is walked in /proc and
  the ``Pss`` of each process (``smaps_rollup``; threads share their process's, so they are
  counted once) summed; the peak over samples is reported (a sampler can miss a short spike);
* wall seconds (noisy on a shared machine: read CPU seconds first), pages per CPU-second
  (clean, vocab) or source tokens per CPU-second (shards);
* clean only: where the peak sits (the engine step running at the peak sample, the driver's
  and each worker's PSS then, the peak while each stage ran) and shuffle bytes per stage per
  byte of input text (``C4FORGE_ENGINE_PROFILE``);
* a crawl projection of the chain: 3.3 × 10⁹ pages at the measured CPU per page of clean and
  shards (default configuration, most workers), plus vocab's sampling pass per page and its
  training at the default sample (which does not grow with the crawl), in CPU-days.

Configurations (``--configs``): ``default`` (no engine option: ``--engine auto``), ``beam``
(``--engine beam``, the DirectRunner), ``spark`` (``--engine spark --master local[W]``).

Usage: ``python benchmarks/scale.py --pages 20000 --files 4 --configs default beam spark
--workers 1 2 --json results.json`` (results are appended to ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path.insert(0, str(_HERE))
# isort: off
import corpus as corpus_mod  # noqa: E402

from c4forge.proctree import cpu_s, pss, tree  # noqa: E402
# isort: on

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

CRAWL_PAGES = 3.3e9
CONFIGS = {
    "default": [],
    "beam": ["--engine", "beam"],
    "spark": ["--engine", "spark", "--master", "local[{w}]"],
}


def measure(cmd: list[str], env: dict) -> dict:
    """Run ``cmd`` with its process tree sampled every 0.5 s: wall, CPU (rusage, or the sum of
    each process's last sampled CPU where larger), peak PSS and where it sat."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak: dict = {"pss": 0, "procs": 0, "at": 0.0, "by_pid": {}}
    timeline: list[tuple[float, int]] = []  # (wall time, tree PSS) per sample
    seen: dict[int, float] = {}  # last CPU seconds sampled per process of the tree
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            pids = tree(proc.pid)
            for p in pids:
                c = cpu_s(p)
                if c is not None:
                    seen[p] = max(c, seen.get(p, 0.0))
            by_pid = {p: pss(p) for p in pids}
            total = sum(by_pid.values())
            now = time.time()
            timeline.append((now, total))
            if total > peak["pss"]:
                peak.update(pss=total, procs=len(pids), at=now, by_pid=by_pid)
            stop.wait(0.5)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    stop.set()
    t.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # rusage covers the processes that were waited for; a JVM (Spark) and its Python workers
    # are not always reaped by the command, so the sampled figure can be the larger one
    cpu = max(
        after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, sum(seen.values())
    )
    return {
        "pid": proc.pid,
        "returncode": proc.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "wall": wall,
        "cpu": cpu,
        "load": load,
        "peak": peak,
        "timeline": timeline,
    }


def _env(extra: dict | None = None) -> dict:
    env = dict(os.environ, **(extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return env


def _peak_fields(m: dict) -> dict:
    """Peak PSS of the tree, and the command's own process (the driver) and each child then."""
    by_pid = m["peak"]["by_pid"]
    return {
        "peak_pss_gb": round(m["peak"]["pss"] / 2**30, 3),
        "procs_at_peak": m["peak"]["procs"],
        "peak_driver_gb": round(by_pid.get(m["pid"], 0) / 2**30, 3),
        "peak_children_gb": sorted(
            (round(v / 2**30, 3) for p, v in by_pid.items() if p != m["pid"]), reverse=True
        ),
    }


def run(corpus: Path, config: str, workers: int, tmp: Path, keep: bool = False) -> dict:
    """One `c4forge clean` run; ``keep``: leave its output (``result["output"]``) for the later
    stages of the chain."""
    out = Path(tempfile.mkdtemp(prefix="scale-", dir=tmp)) / "out"
    profile = out.parent / "profile.json"
    opts = [o.replace("{w}", str(workers)) for o in CONFIGS[config]]
    cmd = [sys.executable, "-m", "c4forge", "clean", str(corpus), "-o", str(out), *opts]
    cmd += ["--workers", str(workers)]
    m = measure(cmd, _env({"C4FORGE_ENGINE_PROFILE": str(profile)}))
    if m["returncode"] != 0:
        raise SystemExit(f"clean failed ({config}, {workers}): {m['stderr'][-3000:]}")
    stats = json.loads((out / "stats.json").read_text())
    meta = json.loads((corpus / "manifest.json").read_text())
    text_bytes = meta["text_bytes"]
    cpu = m["cpu"]
    pages = stats["counters"]["wet"]["pages"]
    result = {
        "stage": "clean",
        "config": config,
        "workers": workers,
        "pages": pages,
        "files": len(corpus_mod.corpus_files(corpus)),
        "text_mb": round(text_bytes / 1e6, 1),
        "input_gz_mb": round(
            sum(p.stat().st_size for p in corpus_mod.corpus_files(corpus)) / 1e6, 1
        ),
        "wall_s": round(m["wall"], 1),
        "cpu_s": round(cpu, 1),
        "pages_per_cpu_s": round(pages / cpu, 1),
        **_peak_fields(m),
        "load_1min": round(m["load"], 2),
        "documents": stats["totals"]["documents_out"],
        "crawl_cpu_days": round(CRAWL_PAGES / (pages / cpu) / 86400, 1),
        "first_line": next(
            (x for x in m["stderr"].splitlines() if x.startswith("c4forge clean")), ""
        ),
    }
    if profile.exists():
        prof = json.loads(profile.read_text())
        shuffled = prof["shuffle_bytes"]
        result["shuffle_bytes_per_text_byte"] = {
            k: round(v / text_bytes, 4) for k, v in sorted(shuffled.items())
        }
        result["shuffle_total_per_text_byte"] = round(sum(shuffled.values()) / text_bytes, 3)
        keys = sum(v for k, v in shuffled.items() if k != "output")
        result["shuffle_keys_per_text_byte"] = round(keys / text_bytes, 3)
        result["stage_cpu_s"] = {k: round(v, 1) for k, v in sorted(prof["seconds"].items())}
        result["peak_during"] = _step_at(prof.get("timeline", []), m["peak"]["at"])
        result["stage_peak_pss_gb"] = _peak_per_step(prof.get("timeline", []), m["timeline"])
    if keep:
        result["output"] = str(out)
    else:
        shutil.rmtree(out.parent, ignore_errors=True)
    return result


def run_vocab(clean: Path, pages: int, vocab_size: int, tmp: Path) -> dict:
    """`c4forge vocab` at its default sample on a clean output (one process: no workers)."""
    out = Path(tempfile.mkdtemp(prefix="scale-vocab-", dir=tmp)) / "vocab"
    cmd = [sys.executable, "-m", "c4forge", "vocab", str(clean), "-o", str(out)]
    cmd += ["--vocab-size", str(vocab_size)]
    m = measure(cmd, _env())
    if m["returncode"] != 0:
        raise SystemExit(f"vocab failed: {m['stderr'][-3000:]}")
    desc = json.loads((out / "vocab.json").read_text())
    timing = re.search(r"sampling ([\d.]+) s, training ([\d.]+) s", m["stdout"])
    sample_s, train_s = (float(timing[1]), float(timing[2])) if timing else (0.0, m["wall"])
    # CPU split between the sampling pass (one thread) and training, in proportion to wall time
    sample_cpu = m["cpu"] * sample_s / (sample_s + train_s) if timing else 0.0
    return {
        "stage": "vocab",
        "config": "default",
        "workers": 1,
        "pages": pages,
        "vocab_size": vocab_size,
        "sample_chars": desc["sample"]["characters"],
        "sample_lines": desc["sample"]["lines"],
        "wall_s": round(m["wall"], 1),
        "cpu_s": round(m["cpu"], 1),
        "sample_cpu_s": round(sample_cpu, 1),
        "train_cpu_s": round(m["cpu"] - sample_cpu, 1),
        "pages_per_cpu_s": round(pages / m["cpu"], 1),
        **_peak_fields(m),
        "load_1min": round(m["load"], 2),
        "first_line": next((x for x in m["stderr"].splitlines() if x.startswith("vocab:")), ""),
        "output": str(out),
    }


def shards_engines() -> tuple[bool, bool]:
    """Does this checkout's `c4forge shards` take ``--engine`` (and ``--master``)? Before the
    shards stage ran on every engine it was Beam only."""
    h = subprocess.run(
        [sys.executable, "-m", "c4forge", "shards", "--help"],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "--engine" in h, "--master" in h


def shards_command(
    config: str, workers: int, has_engine: bool, has_master: bool
) -> list[str] | None:
    """The shards options of a configuration; None where this checkout cannot run it."""
    if not has_engine:
        # Beam only: ``default`` and ``beam`` are the same run, Spark is not possible
        return None if config == "spark" else []
    opts = [o.replace("{w}", str(workers)) for o in CONFIGS[config]]
    if config == "spark" and not has_master:
        opts = opts[:2]
    return opts


def run_shards(
    clean: Path, vocab: Path, pages: int, config: str, workers: int, opts: list[str], tmp: Path
) -> dict:
    """`c4forge shards` (span corruption 512/114, the default) on a clean output."""
    out = Path(tempfile.mkdtemp(prefix="scale-shards-", dir=tmp)) / "shards"
    cmd = [sys.executable, "-m", "c4forge", "shards", str(clean), "--vocab", str(vocab)]
    cmd += ["-o", str(out), *opts, "--workers", str(workers)]
    m = measure(cmd, _env())
    if m["returncode"] != 0:
        raise SystemExit(f"shards failed ({config}, {workers}): {m['stderr'][-3000:]}")
    index = json.loads((out / "index.json").read_text())
    splits = index.get("stats", {})
    tokens = sum(int(s.get("tokens", 0)) for s in splits.values())
    rows = {name: int(s.get("rows", 0)) for name, s in splits.items()}
    result = {
        "stage": "shards",
        "config": config,
        "workers": workers,
        "pages": pages,
        "documents": sum(int(s.get("documents", 0)) for s in splits.values()),
        "tokens": tokens,
        "rows": rows,
        "shard_mb": round(sum(p.stat().st_size for p in out.glob("*.arrow")) / 1e6, 1),
        "wall_s": round(m["wall"], 1),
        "cpu_s": round(m["cpu"], 1),
        "tokens_per_cpu_s": round(tokens / m["cpu"]),
        "pages_per_cpu_s": round(pages / m["cpu"], 1),
        **_peak_fields(m),
        "load_1min": round(m["load"], 2),
        "options": opts,
        "first_line": next(
            (x for x in (m["stderr"] + m["stdout"]).splitlines() if x.startswith("c4forge")), ""
        ),
        "sha256": sorted(
            (sh["file"], sh["sha256"])
            for s in index["splits"].values()
            for sh in s.get("shards", [])
        ),
    }
    shutil.rmtree(out.parent, ignore_errors=True)
    return result


def encode_floor(clean: Path, vocab: Path, batch: int = 256) -> dict:
    """SentencePiece's own encode rate, one thread, on the text the shards stage tokenizes (every
    document of every split): the floor for the stage's tokens per CPU-second."""
    from c4forge.corpus import clean_docs
    from c4forge.vocab.vocab import Vocabulary

    v = Vocabulary.load(str(vocab))
    tokens = chars = 0
    spent = 0.0
    for split in ("train", "validation"):
        for path in clean_docs.list_clean_shards(str(clean), split):
            texts = [d["text"] for d in clean_docs.iter_documents(path)]
            for i in range(0, len(texts), batch):
                part = texts[i : i + batch]
                t0 = time.process_time()
                out = v.encode_arrays(part, num_threads=1)
                spent += time.process_time() - t0
                tokens += sum(len(x) for x in out)
                chars += sum(len(x) for x in part)
    return {
        "stage": "sentencepiece_encode",
        "tokens": tokens,
        "characters": chars,
        "cpu_s": round(spent, 1),
        "tokens_per_cpu_s": round(tokens / spent),
        "load_1min": round(os.getloadavg()[0], 2),
    }


def crawl_projection(clean: dict, vocab: dict | None, shards: dict | None) -> dict:
    """CPU-days for 3.3 × 10⁹ pages: clean and shards at their measured CPU per page; vocab's
    sampling pass per page plus its training at the default sample (bounded: it does not grow
    with the crawl; scaled linearly from this run's sample where that was smaller)."""
    from c4forge.vocab.train import DEFAULT_SAMPLE_CHARS

    days = {"clean": clean["cpu_s"] / clean["pages"] * CRAWL_PAGES / 86400}
    if vocab:
        per_page = vocab["sample_cpu_s"] / vocab["pages"]
        train = vocab["train_cpu_s"] * max(1.0, DEFAULT_SAMPLE_CHARS / vocab["sample_chars"])
        days["vocab"] = (per_page * CRAWL_PAGES + train) / 86400
    if shards:
        days["shards"] = shards["cpu_s"] / shards["pages"] * CRAWL_PAGES / 86400
    out = {k: round(v, 1) for k, v in days.items()}
    out["chain"] = round(sum(days.values()), 1)
    return out


def _step_at(steps: list, t: float) -> str:
    """The engine step (``LocalEngine.timeline``: label, wall start, end) running at ``t``."""
    running = [label for label, start, end in steps if start <= t <= end]
    return running[-1] if running else "between steps"


def _peak_per_step(steps: list, samples: list[tuple[float, int]]) -> dict[str, float]:
    """Peak tree PSS (GB) while each stage (first part of the step label) ran."""
    out: dict[str, float] = {}
    for label, start, end in steps:
        inside = [v for t, v in samples if start <= t <= end]
        if inside:
            stage = label.split("/", 1)[0]
            out[stage] = max(out.get(stage, 0.0), round(max(inside) / 2**30, 3))
    return out


STAGES = ("clean", "vocab", "shards")


def _write(row: dict, path: Path | None) -> None:
    print(json.dumps(row), flush=True)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


def summary(rows: list[dict]) -> list[str]:
    """One line per run: the figures the RESULTS table takes."""
    lines = []
    for r in rows:
        if r["stage"] == "sentencepiece_encode":
            lines.append(
                f"  SentencePiece encode alone (1 thread): {r['tokens']:,} tokens, "
                f"{r['tokens_per_cpu_s']:,} tokens per CPU-s"
            )
            continue
        rate = (
            f"{r['tokens_per_cpu_s']:,} tokens/CPU-s"
            if "tokens_per_cpu_s" in r
            else f"{r['pages_per_cpu_s']:,} pages/CPU-s"
        )
        lines.append(
            f"  {r['stage']:<7} {r['config']:<8} {r['workers']} worker(s): wall {r['wall_s']} s, "
            f"CPU {r['cpu_s']} s, {rate}, peak PSS {r['peak_pss_gb']} GiB (load {r['load_1min']})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, help="corpus folder (default: built under ~/.cache)")
    ap.add_argument("--configs", nargs="+", default=["default"], choices=list(CONFIGS))
    ap.add_argument("--workers", type=int, nargs="+", default=[2])
    ap.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    ap.add_argument("--vocab-size", type=int, default=8000)
    ap.add_argument(
        "--clean", type=Path, help="an existing clean output of the corpus for vocab and shards"
    )
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--json", type=Path, help="append each run's figures here (JSON lines)")
    ap.add_argument(
        "--vocab", type=Path, help="an existing vocabulary of --clean for shards (skips vocab)"
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="leave the chain's clean output and vocabulary under --tmp (their paths are printed) "
        "for later runs with --clean",
    )
    args = ap.parse_args(argv)
    corpus = args.corpus or (
        Path.home() / ".cache" / "c4forge-bench" / f"unique-s{args.seed}-n{args.pages}"
    )
    corpus_mod.build(corpus, args.pages, args.seed, args.files, [], unique=True)
    chain = any(s in args.stages for s in ("vocab", "shards"))
    rows: list[dict] = []
    kept: list[Path] = []
    clean_out: Path | None = args.clean
    for config in args.configs if "clean" in args.stages else []:
        for w in args.workers:
            r = run(corpus, config, w, args.tmp, keep=(chain or args.keep) and clean_out is None)
            if "output" in r:
                clean_out = Path(r.pop("output"))
                kept.append(clean_out.parent)
            rows.append(r)
            _write(r, args.json)
    if chain and clean_out is None:  # the chain needs one clean output: the default command
        r = run(corpus, "default", max(args.workers), args.tmp, keep=True)
        clean_out = Path(r.pop("output"))
        kept.append(clean_out.parent)
    pages = (
        json.loads((clean_out / "stats.json").read_text())["counters"]["wet"]["pages"]
        if clean_out
        else 0
    )
    vocab_row = None
    try:
        if args.vocab and "vocab" not in args.stages:
            vocab_dir = args.vocab
        elif chain:
            assert clean_out is not None
            vocab_row = run_vocab(clean_out, pages, args.vocab_size, args.tmp)
            vocab_dir = Path(vocab_row.pop("output"))
            kept.append(vocab_dir.parent)
            if "vocab" in args.stages:
                rows.append(vocab_row)
                _write(vocab_row, args.json)
        if "shards" in args.stages:
            assert clean_out is not None
            floor = encode_floor(clean_out, vocab_dir)
            rows.append(floor)
            _write(floor, args.json)
            has_engine, has_master = shards_engines()
            for config in args.configs:
                for w in args.workers:
                    opts = shards_command(config, w, has_engine, has_master)
                    same_as_default = (
                        not has_engine and config == "beam" and "default" in args.configs
                    )
                    if opts is None or same_as_default:
                        why = "the default run is the Beam run" if same_as_default else "no Spark"
                        print(
                            f"shards {config}, {w} worker(s): not run: this checkout's `c4forge "
                            f"shards` has no --engine (Beam only: {why})",
                            flush=True,
                        )
                        continue
                    r = run_shards(clean_out, vocab_dir, pages, config, w, opts, args.tmp)
                    r["floor_fraction"] = round(
                        r["tokens_per_cpu_s"] / floor["tokens_per_cpu_s"], 3
                    )
                    rows.append(r)
                    _write(r, args.json)
    finally:
        for k in kept:
            if args.keep:
                print(f"kept: {k}", flush=True)
            else:
                shutil.rmtree(k, ignore_errors=True)
    print("\n".join(["summary:", *summary(rows)]))
    best = {s: [r for r in rows if r["stage"] == s and r["config"] == "default"] for s in STAGES}
    if best["clean"]:
        last = {s: (max(v, key=lambda r: r["workers"]) if v else None) for s, v in best.items()}
        proj = crawl_projection(last["clean"], last["vocab"] or vocab_row, last["shards"])
        row = {"stage": "crawl_projection", "pages": CRAWL_PAGES, "cpu_days": proj}
        print(f"crawl projection ({CRAWL_PAGES:.2g} pages), CPU-days: {proj}")
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
