"""Byte identity of `c4forge clean` across a code change: every variant, every dedup mode,
near-dedup on, both engines, 1 and 2 workers, on real bundled text.

Why a script and not a test: the matrix is ~40 full runs (minutes of CPU); a test suite cannot
afford it, a change to how the job is computed (keys-only shuffles, say) must pass it.

    # 1. reference outputs with the code before the change (e.g. a checkout of main)
    PYTHONPATH=/path/to/main python3 benchmarks/identity.py run --out /tmp/ref
    # 2. the same matrix with this tree
    PYTHONPATH=. python3 benchmarks/identity.py run --out /tmp/new
    # 3. compare: every shard file byte for byte, stats.json key by key
    python3 benchmarks/identity.py compare /tmp/ref /tmp/new

Inputs (``--out``/inputs, built once): a ``benchmarks/corpus.py`` corpus (real sentences
recombined; ``--pages`` in 4 files) plus the bundled samples (the 1,000 real C4 documents and
the 697 dolma Common Crawl pages as WET, the WET derived from real HTML), and a URL list for
``webtextlike`` (every fourth URL of the inputs, respelt). ``--only`` picks runs by label
substring; ``--resume-kill`` adds runs killed by SIGKILL mid-job and finished with ``--resume``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]

# (label, clean options); each runs on beam and spark with 1 and 2 workers
CONFIGS: list[tuple[str, list[str]]] = [
    ("en-spans", []),
    ("en-lines", ["--dedup", "lines"]),
    ("en-none", ["--dedup", "none"]),
    ("en-spans-minhash", ["--near-dedup", "minhash"]),
    ("en-lines-minhash", ["--dedup", "lines", "--near-dedup", "minhash"]),
    ("en.noclean", ["--variant", "en.noclean"]),
    ("en.noblocklist", ["--variant", "en.noblocklist"]),
    ("realnewslike", ["--variant", "realnewslike"]),
    ("webtextlike", ["--variant", "webtextlike", "--url-list", "{urls}"]),
    ("en-none-minhash-neardup", ["--dedup", "none", "--near-dedup", "minhash"]),
    ("en-lines-minhash-neardup", ["--dedup", "lines", "--near-dedup", "minhash"]),
    ("multilingual", ["--variant", "multilingual"]),
    (
        "multilingual-none-minhash",
        ["--variant", "multilingual", "--dedup", "none", "--near-dedup", "minhash"],
    ),
]
ENGINES = [("beam", []), ("spark", ["--engine", "spark"]), ("local", ["--engine", "local"])]
WORKERS = (1, 2)


def build_inputs(d: Path, pages: int) -> list[str]:
    """The corpus + the bundled samples as WET files, and the URL list (``d/urls.txt.gz``)."""
    from c4forge.corpus.counting import CounterBag
    from c4forge.corpus.urls import normalize_url
    from c4forge.readers.wet import open_binary, read_wet
    from c4forge.samples import demo_inputs

    d.mkdir(parents=True, exist_ok=True)
    corpus = d / "corpus"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "corpus.py"),
            "--pages",
            str(pages),
            "--files",
            "4",
            "--out",
            str(corpus),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    files = sorted(str(p) for p in corpus.glob("bench-*.warc.wet.gz"))
    files += demo_inputs(str(d))
    urls_path = d / "urls.txt.gz"
    if not urls_path.exists():
        urls = []
        for f in files:
            with open_binary(f) as s:
                urls += [p.url for p in read_wet(s, f, CounterBag(), max_record_bytes=64 << 20)]
        listed = ["http://www." + normalize_url(u) + "/" for u in urls[::4]]
        listed += [f"http://unlisted.example.org/{i}" for i in range(7)]
        with gzip.open(urls_path, "wt", encoding="utf-8") as f:
            f.write("\n".join(listed) + "\n")
    near = d / "neardup.warc.wet.gz"
    if not near.exists():
        near.write_bytes(_near_duplicates())
    return files


def _near_duplicates() -> bytes:
    """Real C4 documents each copied 1–3 times under new URLs with one word changed per copy:
    near-duplicate components for MinHash (``*-neardup`` runs add this file to the inputs)."""
    from c4forge.samples import c4_docs_to_wet_bytes, iter_c4_sample

    docs = []
    for i, doc in enumerate(iter_c4_sample()[:300]):
        for c in range(1 + i % 3):
            words = doc["text"].split(" ")
            words[(7 * c + i) % len(words)] = f"variant{c}"
            docs.append({**doc, "url": f"{doc['url']}/copy-{c}", "text": " ".join(words)})
    return c4_docs_to_wet_bytes(docs)


def runs(only: str | None, engines: str = "beam,spark") -> list[tuple[str, list[str]]]:
    out = []
    for label, opts in CONFIGS:
        for engine, eopts in ENGINES:
            if engine not in engines.split(","):
                continue
            for w in WORKERS:
                name = f"{label}.{engine}.w{w}"
                if only is None or any(o in name for o in only.split(",")):
                    out.append((name, [*opts, *eopts, "--workers", str(w)]))
    return out


def _cmd(files: list[str], out: Path, opts: list[str], inputs: Path) -> list[str]:
    opts = [o.replace("{urls}", str(inputs / "urls.txt.gz")) for o in opts]
    if "-neardup." in out.name:
        files = [*files, str(inputs / "neardup.warc.wet.gz")]
    return [sys.executable, "-m", "c4forge", "clean", *files, "-o", str(out), "--quiet", *opts]


def cmd_run(args: argparse.Namespace) -> int:
    base = Path(args.out)
    inputs = Path(args.inputs) if args.inputs else base / "inputs"
    files = build_inputs(inputs, args.pages)
    print(f"code: {os.environ.get('PYTHONPATH', '(installed)')}; {len(files)} inputs", flush=True)
    failed = 0
    for name, opts in runs(args.only, args.engines):
        out = base / name
        if (out / "stats.json").exists() and not args.force:
            continue
        t0 = time.monotonic()
        r = subprocess.run(_cmd(files, out, opts, inputs), capture_output=True, text=True, cwd="/")
        status = "ok" if r.returncode == 0 else f"FAILED rc={r.returncode}: {r.stderr[-400:]}"
        failed += r.returncode != 0
        print(f"{name}: {status} ({time.monotonic() - t0:.0f} s)", flush=True)
    if args.resume_kill:
        failed += resume_kill_runs(files, base, inputs, args.only, args.engines)
    return 1 if failed else 0


def resume_kill_runs(
    files: list[str], base: Path, inputs: Path, only: str | None, engines: str
) -> int:
    """A run SIGKILLed after ``delay`` s, then finished with ``--resume`` (outputs must equal
    the uninterrupted run's)."""
    failed = 0
    for name, opts in runs(only, engines):
        if not name.startswith(("en-spans.", "en-lines-minhash.")):
            continue
        for delay in (4, 12, 25):
            out = base / f"{name}.killed{delay}"
            if (out / "stats.json").exists():
                continue
            cmd = _cmd(files, out, [*opts, "--resume"], inputs)
            p = subprocess.Popen(
                cmd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                cwd="/",
            )
            time.sleep(delay)
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            r = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
            failed += r.returncode != 0
            print(f"{out.name}: {'ok' if r.returncode == 0 else r.stderr[-400:]}", flush=True)
    return failed


def _files(d: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(d.iterdir())
        if p.is_file() and p.name != "stats.json"
    }


def _diff_keys(a: object, b: object, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _diff_keys(a.get(k), b.get(k), f"{path}.{k}")
        return out
    return [] if a == b else [path or "."]


def cmd_compare(args: argparse.Namespace) -> int:
    ref, new = Path(args.ref), Path(args.new)
    names = sorted(p.name for p in new.iterdir() if (p / "stats.json").exists())
    bad = 0
    ignored = set(args.ignore or [])
    for name in names:
        ref_name = name.split(".killed")[0]
        label, engine, workers = ref_name.rsplit(".", 2)
        if engine not in ("beam", "spark"):  # another engine: the Beam run of the same config
            ref_name = f"{label}.beam.{workers}"
        r = ref / ref_name
        if not (r / "stats.json").exists():  # main's engines and worker counts agree (its tests)
            r = ref / f"{label}.beam.w1"
        if not (r / "stats.json").exists():
            print(f"{name}: no reference")
            bad += 1
            continue
        a, b = _files(r), _files(new / name)
        problems = []
        if a.keys() != b.keys():
            problems.append(f"files differ: {sorted(a.keys() ^ b.keys())}")
        problems += [f"{k} differs" for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]
        sa = json.loads((r / "stats.json").read_text())
        sb = json.loads((new / name / "stats.json").read_text())
        keys = [k for k in _diff_keys(sa, sb) if not any(k.startswith(i) for i in ignored)]
        if keys:
            problems.append(f"stats.json keys differ: {keys[:8]}")
        bad += bool(problems)
        docs = sb["totals"]["documents_out"] if "totals" in sb else "?"
        verdict = "IDENTICAL" if not problems else "; ".join(problems)
        print(f"{name}: {verdict} ({docs} docs; reference {r.name})")
    print(f"{len(names) - bad}/{len(names)} identical")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--inputs", help="input folder (default OUT/inputs)")
    r.add_argument("--pages", type=int, default=3000, help="corpus.py pages (plus the samples)")
    r.add_argument("--only", help="comma-separated label substrings")
    r.add_argument("--force", action="store_true", help="redo runs that have a stats.json")
    r.add_argument(
        "--engines", default="beam,spark", help="beam,spark[,local] (local: not on main)"
    )
    r.add_argument("--resume-kill", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("ref")
    c.add_argument("new")
    c.add_argument("--ignore", nargs="*", help="stats.json key prefixes expected to differ")
    args = ap.parse_args(argv)
    return cmd_run(args) if args.cmd == "run" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
