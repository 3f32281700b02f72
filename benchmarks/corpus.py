"""Build a benchmark WET corpus (default 20,000 pages) by recombining real web text.

Why recombine: the project ships ~2,000 real pages, too few to time a job, and copying them 10x
would make span dedup delete almost everything (every 3-sentence window repeated), so the later
stages would see an unrealistically small corpus.  Instead each page is generated from a real
page, deterministically from ``--seed``:

* Sources (real text only): the 1,000 real C4 documents and the 191-record WET derived from
  real HTML (``c4forge/data/sample/``), the genuine Common Crawl WET excerpts and the 81
  multilingual Common Crawl pages under ``tests/data/``, and the full dolma CC
  file of 697 multilingual pages (``c4forge/data/sample/CC-MAIN-…-00140``;
  ``--extra`` adds more ``.jsonl[.gz]`` files with a ``text`` field).
* A generated page takes a random source page's line structure.  Lines that look like prose
  (ending in ``. ? ! "`` with >= 5 words) are rebuilt with the same number of sentences, each
  drawn at random from the sentence pool of the source page's language (langdetect top
  language of the whole source page), so 3-sentence windows are mostly new but the text stays
  real sentences of that language; 10 % of prose lines are kept verbatim (real duplicated
  spans).  Other lines (menus, dates, short fragments) are kept as they are.
* Already-clean C4 documents get 2-6 boilerplate lines from the raw WET pages before and after
  them, so they look like raw WET text again.
* URL: the source page's host plus a unique path; 2 % reuse an earlier URL with another
  timestamp (URL dedup work), 1 % carry a ``?utm_source=`` suffix.  Timestamps fall in
  April 2019 (the reference snapshot's month).

Output: ``--files`` WET files ``bench-NNNNN.warc.wet.gz`` in ``--out`` (default
``~/.cache/c4forge-bench/corpus-s<seed>-n<pages>``), one gzip member per record as Common
Crawl writes them (warcio ``WARCWriter(gzip=True)``): a ``warcinfo`` record, then
``conversion`` records (``text/plain``).  A ``manifest.json`` records the parameters; an
existing corpus with the same manifest is reused.

Usage: ``python benchmarks/corpus.py [--pages 20000] [--seed 0] [--out DIR]``
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import random
import re
import sys
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, benchmarks/ is sys.path[0], where benchmarks/langdetect.py would shadow the
# real langdetect package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
SAMPLE = ROOT / "c4forge" / "data" / "sample"
TESTS_DATA = ROOT / "tests" / "data"
DOLMA = SAMPLE / "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"
VERSION = 1  # bump when the generation changes, so cached corpora are rebuilt
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")
_END_MARKS = (".", "?", "!", '"')


def default_out(pages: int, seed: int) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "c4forge-bench" / f"corpus-s{seed}-n{pages}"


def _read_wet(path: Path) -> list[tuple[str, str]]:
    from warcio.archiveiterator import ArchiveIterator

    out = []
    with open(path, "rb") as f:
        for rec in ArchiveIterator(f):
            if rec.rec_type == "conversion":
                url = rec.rec_headers.get_header("WARC-Target-URI") or ""
                text = rec.content_stream().read().decode("utf-8", "replace")
                out.append((url.strip("<>"), text))
    return out


def _read_jsonl(path: Path) -> list[tuple[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            meta = doc.get("metadata") or {}
            url = doc.get("url") or meta.get("warc_url") or f"http://source.invalid/{len(out)}"
            if doc.get("text"):
                out.append((url, doc["text"]))
    return out


def load_sources(extra: list[Path]) -> dict[str, list[tuple[str, str]]]:
    """``{kind: [(url, text)]}``; kind ``c4`` is already-clean text, ``raw`` is WET-like."""
    sources: dict[str, list[tuple[str, str]]] = {"c4": [], "raw": []}
    sources["c4"] += _read_jsonl(SAMPLE / "c4-sample.00000-of-00001.json.gz")
    for path in sorted(SAMPLE.glob("*.wet.gz")) + sorted(TESTS_DATA.glob("wet/*.wet*")):
        sources["raw"] += _read_wet(path)
    jsonl = [TESTS_DATA / "langdetect" / "dolma-cc-multilingual.jsonl.gz"]
    if DOLMA.exists():
        jsonl = [DOLMA]  # a superset of the tests/data excerpt
    for path in jsonl + extra:
        sources["raw"] += _read_jsonl(path)
    return sources


def _language(text: str) -> str:
    from langdetect import LangDetectException

    from c4forge.langid.langdetect_fast import detect_langs_fast

    try:
        result = detect_langs_fast(text)
    except LangDetectException:
        return "xx"
    return result[0].lang if result else "xx"


def _is_prose(line: str) -> bool:
    return line.endswith(_END_MARKS) and len(line.split()) >= 5


def _record_id(*parts: object) -> str:
    """Deterministic ``WARC-Record-ID`` (warcio's default is a random uuid4)."""
    h = hashlib.md5(repr(parts).encode()).hexdigest()
    return f"<urn:uuid:{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}>"


def _write_conversion(writer, url: str, date: str, text: str, record_id: str) -> None:  # noqa: ANN001
    payload = text.encode("utf-8")
    rec = writer.create_warc_record(
        url,
        "conversion",
        payload=io.BytesIO(payload),
        length=len(payload),
        warc_content_type="text/plain",
        warc_headers_dict={"WARC-Record-ID": record_id, "WARC-Date": date},
    )
    writer.write_record(rec)


def _fast_conversion(fh, url: str, date: str, text: str, record_id: str) -> None:  # noqa: ANN001
    """The same WARC conversion record as ``_write_conversion`` (less warcio's digests),
    written as one gzip member at level 1: ~5× faster, for the million-page corpus."""
    payload = text.encode("utf-8")
    head = (
        f"WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Target-URI: {url}\r\n"
        f"WARC-Date: {date}\r\nWARC-Record-ID: {record_id}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    ).encode()
    fh.write(gzip.compress(head + payload + b"\r\n\r\n", compresslevel=1, mtime=0))


def build(
    out: Path, pages: int, seed: int, files: int, extra: list[Path], unique: bool = False
) -> Path:
    """Write the corpus (or reuse a matching one); returns ``out``. ``unique``: every prose
    line rebuilt with at least three drawn sentences (no verbatim 10 %), so three-sentence spans
    are unique and span dedup removes little, as on a real crawl (``benchmarks/scale.py``)."""
    from warcio.warcwriter import WARCWriter

    from c4forge.progress import progress

    sources = load_sources(extra)
    manifest = {
        "version": VERSION,
        "pages": pages,
        "seed": seed,
        "files": files,
        "sources": {k: len(v) for k, v in sources.items()},
        "source_sha256": hashlib.sha256(
            "".join(t for kind in sorted(sources) for _, t in sources[kind]).encode()
        ).hexdigest(),
    }
    if unique:
        manifest["unique"] = True
    mpath = out / "manifest.json"
    if mpath.exists() and json.loads(mpath.read_text())["build"] == manifest:
        return out
    out.mkdir(parents=True, exist_ok=True)

    # language of each source page; sentence pools per language; boilerplate pool
    entries = []  # (kind, url, lines, lang)
    pools: dict[str, list[str]] = defaultdict(list)
    boiler: list[str] = []
    for kind in ("c4", "raw"):
        for url, text in sources[kind]:
            lang = _language(text)
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            entries.append((kind, url, lines, lang))
            for ln in lines:
                if _is_prose(ln):
                    pools[lang].extend(s for s in _SENTENCE_END.split(ln) if s)
                elif kind == "raw" and len(ln) < 200:
                    boiler.append(ln)

    rng = random.Random(seed)
    urls: list[str] = []
    total_bytes = 0
    per_file = -(-pages // files)
    for fi in progress(range(files), desc="corpus files", unit="file"):
        path = out / f"bench-{fi:05d}.warc.wet.gz"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            writer = WARCWriter(fh, gzip=True, warc_version="WARC/1.0")
            info = writer.create_warcinfo_record(
                path.name, {"software": "c4forge benchmarks/corpus.py", "seed": str(seed)}
            )
            info.rec_headers.replace_header("WARC-Record-ID", _record_id(seed, fi))
            info.rec_headers.replace_header("WARC-Date", "2019-04-26T00:00:00Z")
            writer.write_record(info)
            for i in range(fi * per_file, min(pages, (fi + 1) * per_file)):
                kind, src_url, lines, lang = entries[rng.randrange(len(entries))]
                pool = pools.get(lang) or pools["en"]
                new_lines = []
                for ln in lines:
                    if _is_prose(ln) and (unique or rng.random() >= 0.1):
                        n = max(3 if unique else 1, len(_SENTENCE_END.split(ln)))
                        new_lines.append(" ".join(rng.choice(pool) for _ in range(n)))
                    else:
                        new_lines.append(ln)
                if kind == "c4":
                    head = [rng.choice(boiler) for _ in range(rng.randint(2, 6))]
                    tail = [rng.choice(boiler) for _ in range(rng.randint(2, 6))]
                    new_lines = head + new_lines + tail
                text = "\n".join(new_lines)
                if urls and rng.random() < 0.02:
                    url = rng.choice(urls)
                else:
                    host = urlsplit(src_url).netloc or "example.org"
                    url = f"http://{host}/bench/{seed}/{i:07d}"
                    if rng.random() < 0.01:
                        url += "?utm_source=bench"
                    urls.append(url)
                date = (
                    f"2019-04-{rng.randint(18, 26):02d}T{rng.randint(0, 23):02d}:"
                    f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
                )
                if unique:
                    _fast_conversion(fh, url, date, text, _record_id(seed, fi, i))
                else:
                    _write_conversion(writer, url, date, text, _record_id(seed, fi, i))
                total_bytes += len(text.encode("utf-8"))
        os.replace(tmp, path)
    manifest_out = {"build": manifest, "text_bytes": total_bytes}
    mpath.write_text(json.dumps(manifest_out, indent=2, sort_keys=True) + "\n")
    return out


def corpus_files(out: Path) -> list[Path]:
    return sorted(out.glob("bench-*.warc.wet.gz"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--files", type=int, default=20, help="number of WET files")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--extra", type=Path, nargs="*", default=[], help="more .jsonl[.gz] sources")
    ap.add_argument("--unique", action="store_true", help="unique three-sentence spans")
    args = ap.parse_args(argv)
    out = args.out or default_out(args.pages, args.seed)
    build(out, args.pages, args.seed, args.files, args.extra, args.unique)
    meta = json.loads((out / "manifest.json").read_text())
    size = sum(p.stat().st_size for p in corpus_files(out))
    print(
        f"corpus: {out}\n  {meta['build']['pages']:,} pages in {len(corpus_files(out))} files, "
        f"{meta['text_bytes'] / 1e6:.1f} MB text, {size / 1e6:.1f} MB gzip\n"
        f"  sources: {meta['build']['sources']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
