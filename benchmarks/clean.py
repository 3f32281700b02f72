"""Benchmark of ``c4forge clean`` on the 20,000-page corpus of ``benchmarks/corpus.py``.

Two measurements:

1. **End to end**: ``python -m c4forge clean CORPUS --output TMP --workers N`` as a subprocess,
   for each ``--workers`` value (default 1 and 2).  Prints wall time, pages/s and input MB/s,
   the same per core (divided by N), the CPU seconds the job's processes used (user + sys,
   ``RUSAGE_CHILDREN``) and pages per CPU second (robust when the machine is shared), and peak
   memory (sum of the RSS of the job's process tree, sampled every 0.2 s).
2. **Stage shares** (single core, one process): Beam does not expose per-stage CPU time, so the
   plain filter functions run in sequence over the same pages, each timed: parse (gzip + WARC
   + page text + URL normalisation), URL dedup, length + line rules (clean, without Punkt),
   sentence split (Punkt calls made by clean_page), span dedup (the in-memory equivalent of
   the shuffle; the Beam shuffle adds serialisation on top), langdetect, bad words, split,
   write (JSON + gzip level of the shards).  Stock langdetect is timed on every 10th page that
   reaches langid and scaled, to show what the fast backend saves.

``--langdetect fast|stock|as-is`` chooses the backend of the end-to-end job through the
``C4FORGE_LANGDETECT`` environment variable, which ``c4forge.filters.langid`` reads in every
process (workers included); ``as-is`` leaves the environment alone (fast by default).

Usage: ``python benchmarks/clean.py [--workers 1 2] [--langdetect fast] [--skip-e2e]``
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
# benchmarks/langdetect.py must not shadow the real langdetect package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_spec = importlib.util.spec_from_file_location("c4forge_bench_corpus", _HERE / "corpus.py")
corpus_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus_mod)

GOAL_PAGES_PER_CORE_S = 450


# ------------------------------------------------------------------------------------------
# end to end


def _tree_rss(root_pid: int) -> int:
    """Sum of VmRSS (bytes) of ``root_pid`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children[ppid].append(int(entry))
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def run_job(files_dir: Path, workers: int, langdetect: str, extra: list[str]) -> dict:
    out = Path(tempfile.mkdtemp(prefix="c4forge-bench-clean-"))
    shutil.rmtree(out)
    env = dict(os.environ)
    if langdetect != "as-is":
        # c4forge.filters.langid reads it in every worker process: "fast" (default) or "stock".
        env["C4FORGE_LANGDETECT"] = langdetect
    cmd = [sys.executable, "-m", "c4forge", "clean", str(files_dir), "--output", str(out)]
    cmd += ["--workers", str(workers), "--quiet", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if rc != 0:
        raise SystemExit(f"clean job failed (exit {rc}): {' '.join(cmd)}")
    stats = json.loads((out / "stats.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    totals = stats["totals"]
    return {
        "workers": workers,
        "wall": wall,
        "cpu": cpu,
        "peak_rss": peak,
        "pages": totals["pages_in"],
        "bytes": totals["bytes_in"],
        "docs_out": totals["documents_out"],
        "shard_sha256": sorted(
            f["content_sha256"] for split in stats["outputs"].values() for f in split["files"]
        ),
    }


def _digest(content_hashes: list[str]) -> str:
    """Short digest of every shard's content sha256, to compare runs (backends, workers)."""
    import hashlib

    return hashlib.sha256("".join(content_hashes).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------
# single-core stage profile


def stage_profile(files: list[Path], stock_every: int) -> None:
    from c4forge.filters import clean as clean_mod
    from c4forge.filters import langid
    from c4forge.filters.badwords import badwords_filter
    from c4forge.filters.counting import CounterBag
    from c4forge.filters.dedup import dedup_spans_local
    from c4forge.filters.langdetect_fast import detect_langs_fast
    from c4forge.filters.split import split_of
    from c4forge.filters.urls import choose_url_copy
    from c4forge.filters.wet import read_wet
    from c4forge.pipeline.clean_output import GZIP_LEVEL

    bag = CounterBag()
    t: dict[str, float] = defaultdict(float)
    clock = time.process_time

    # warm-ups outside the timed regions (tables, Punkt parameters, bad-words regex)
    detect_langs_fast("warm up")
    clean_mod.split_sentences("Warm up. Punkt.")
    badwords_filter("warm up", "en", "x", CounterBag())

    punkt = clean_mod.split_sentences

    def timed_punkt(line: str) -> list[str]:
        a = clock()
        try:
            return punkt(line)
        finally:
            t["sentence split"] += clock() - a

    a = clock()
    pages = []
    in_bytes = 0
    for path in files:
        in_bytes += path.stat().st_size
        with open(path, "rb") as f:
            pages.extend(read_wet(f, str(path), bag))
    t["parse"] = clock() - a
    n_pages = len(pages)

    a = clock()
    groups: dict[str, list] = defaultdict(list)
    for p in pages:
        groups[p.normalized_url].append(p)
    unique = [choose_url_copy(g)[0] for g in groups.values()]
    t["URL dedup"] = clock() - a

    clean_mod.split_sentences = timed_punkt
    try:
        a = clock()
        cleaned = []
        for p in unique:
            if clean_mod.length_filter(p.text, bag):
                c = clean_mod.clean_page(p.text, bag)
                if c is not None:
                    cleaned.append((p, c))
        t["clean (line rules)"] = clock() - a - t["sentence split"]
    finally:
        clean_mod.split_sentences = punkt

    a = clock()
    new_text = dedup_spans_local([(p.url, c.sentences) for p, c in cleaned], bag)
    deduped = [(p, new_text[p.url]) for p, _ in cleaned if new_text[p.url] is not None]
    t["dedup (spans, in memory)"] = clock() - a

    original = langid._detect_langs
    langid._detect_langs = detect_langs_fast
    try:
        a = clock()
        english = [(p, txt) for p, txt in deduped if langid.langid_filter(txt, bag)]
        t["langdetect (fast)"] = clock() - a
    finally:
        langid._detect_langs = original
    sample = [txt for _, txt in deduped[::stock_every]]
    # langid.py picks its backend from C4FORGE_LANGDETECT (fast by default): force the stock
    # langdetect here, or this "stock" figure would time the fast backend again.
    backend = langid._BACKEND
    langid._BACKEND = "stock"
    try:
        langid.langid_filter("warm up the stock profiles", CounterBag())  # loads the profiles
        a = clock()
        for txt in sample:
            langid.langid_filter(txt, CounterBag())
        stock_langid = (clock() - a) * len(deduped) / max(len(sample), 1)
    finally:
        langid._BACKEND = backend

    a = clock()
    kept = [(p, txt) for p, txt in english if badwords_filter(txt, "en", p.normalized_url, bag)]
    t["bad words"] = clock() - a

    a = clock()
    splits = {"train": io.BytesIO(), "validation": io.BytesIO()}
    gz = {
        k: gzip.GzipFile(fileobj=v, mode="wb", compresslevel=GZIP_LEVEL, mtime=0)
        for k, v in splits.items()
    }
    for p, txt in kept:
        doc = {"text": txt, "timestamp": p.timestamp, "url": p.url}
        line = json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"
        gz[split_of(p.normalized_url)].write(line.encode("utf-8"))
    for g in gz.values():
        g.close()
    t["split + write"] = clock() - a

    total = sum(t.values())
    print(
        f"\nStage profile, one process, CPU time: {n_pages:,} pages ({in_bytes / 1e6:.1f} MB "
        f"gzip WET) -> {len(unique):,} unique URLs -> {len(cleaned):,} cleaned -> "
        f"{len(deduped):,} after dedup -> {len(english):,} English -> {len(kept):,} written"
    )
    for name, secs in t.items():
        per_page = secs / n_pages * 1e3
        print(f"  {name:<26} {secs:7.2f} s  {secs / total:6.1%}  {per_page:.3f} ms/input page")
    print(f"  {'total':<26} {total:7.2f} s  -> {n_pages / total:,.0f} pages/s on one core")
    swapped = total - t["langdetect (fast)"] + stock_langid
    print(
        f"  with stock langdetect (timed on every {stock_every}th langid page, scaled): langid "
        f"{stock_langid:.1f} s = {stock_langid / swapped:.0%} of {swapped:.1f} s -> "
        f"{n_pages / swapped:,.0f} pages/s; fast langdetect is "
        f"x{stock_langid / t['langdetect (fast)']:.0f} on this stage"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--langdetect", choices=["fast", "stock", "as-is"], default="fast")
    ap.add_argument("--skip-e2e", action="store_true", help="only the stage profile")
    ap.add_argument("--skip-profile", action="store_true", help="only the end-to-end runs")
    ap.add_argument("--stock-every", type=int, default=10)
    ap.add_argument("job_args", nargs="*", help="after --: more `c4forge clean` options")
    args = ap.parse_args(argv)

    out = corpus_mod.build(
        corpus_mod.default_out(args.pages, args.seed), args.pages, args.seed, 20, []
    )
    files = corpus_mod.corpus_files(out)
    text_mb = json.loads((out / "manifest.json").read_text())["text_bytes"] / 1e6
    print(f"corpus: {out} ({len(files)} files, {text_mb:.1f} MB text); host: {os.cpu_count()} CPUs")

    if not args.skip_e2e:
        digests = set()
        for workers in args.workers:
            r = run_job(out, workers, args.langdetect, args.job_args)
            digests.add(tuple(r["shard_sha256"]))
            mb = text_mb  # MB/s of WET text (uncompressed payload)
            print(
                f"end to end, --workers {workers}, langdetect {args.langdetect}: "
                f"{r['pages']:,} pages ({mb:.1f} MB text, {r['bytes'] / 1e6:.1f} MB gzip) -> "
                f"{r['docs_out']:,} docs in {r['wall']:.1f} s wall: "
                f"{r['pages'] / r['wall']:,.0f} pages/s, {mb / r['wall']:.2f} MB/s; per core "
                f"{r['pages'] / r['wall'] / workers:,.0f} pages/s, "
                f"{mb / r['wall'] / workers:.2f} MB/s; CPU {r['cpu']:.1f} s -> "
                f"{r['pages'] / r['cpu']:,.0f} pages and {mb / r['cpu']:.2f} MB per CPU-second "
                f"(goal {GOAL_PAGES_PER_CORE_S} pages); peak RSS {r['peak_rss'] / 2**20:,.0f} MiB; "
                f"shard contents {_digest(r['shard_sha256'])}"
            )
        if len(args.workers) > 1:
            print(f"  shard contents identical across worker counts: {len(digests) == 1}")

    if not args.skip_profile:
        stage_profile(files, args.stock_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
