"""`c4forge contamination`: which evaluation examples does a corpus contain?

Every document of the corpus (a `c4forge clean` output, a published C4 shard, any JSON-lines
file with ``text``) is matched against the benchmarks' word n-grams (``ngrams.py``, the same
rule as `clean --decontaminate`); per benchmark and split: examples, contaminated examples and
their share, and for each contaminated example the documents (file, line, URL) holding it.
Written as ``contamination.json`` (``--exclude`` of `evaluate`/`glue` reads it) and
``contamination.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from c4forge.errors import InputError
from c4forge.io import ownership, storage

FORMAT = "c4forge.contamination"
FORMAT_VERSION = 1
JSON_NAME = "contamination.json"
MD_NAME = "contamination.md"
_CORPUS_SUFFIXES = (".json.gz", ".jsonl.gz", ".jsonl", ".json", ".parquet")
MAX_DOCS_LISTED = 20  # documents listed per contaminated example (the count is always exact)


def corpus_files(paths: list[str]) -> list[str]:
    """Document files of ``paths``: a file as is; a folder's ``c4-*`` shards (every split) or,
    without any, its JSON-lines/Parquet files; sorted, each once."""
    from c4forge.corpus.clean_docs import SHARD_RE

    out: list[str] = []
    for p in paths:
        if os.path.isfile(p):
            out.append(p)
            continue
        if not os.path.isdir(p):
            raise InputError(f"corpus {p}: no such file or folder")
        names = sorted(os.listdir(p))
        shards = [n for n in names if SHARD_RE.match(n)]
        chosen = shards or [n for n in names if n.endswith(_CORPUS_SUFFIXES) and n != JSON_NAME]
        if not chosen:
            raise InputError(f"corpus {p}: no c4-*.json.gz, .jsonl or .parquet document files")
        out += [os.path.join(p, n) for n in chosen]
    return list(dict.fromkeys(out))


def iter_corpus(files: list[str]) -> Iterator[tuple[str, int, str, str]]:
    """``(file name, line or row, url, text)`` of every document."""
    from c4forge.corpus.clean_docs import iter_documents

    for path in files:
        name = os.path.basename(path)
        for i, doc in enumerate(iter_documents(path), 1):
            url = doc["url"] or (doc.get("metadata") or {}).get("url", "") or ""
            yield name, i, str(url), doc["text"]


def scan(files: list[str], index: Any, progress: bool = False) -> tuple[dict[int, list], dict]:
    """Example id → documents holding it; and per-file document counts."""
    from c4forge.progress import progress as progress_display

    found: dict[int, list[tuple[str, int, str]]] = {}
    per_file: dict[str, int] = {}
    contaminated_docs = 0
    docs = iter_corpus(files)
    bar = progress_display(docs, desc="documents", unit="doc", disable=not progress)
    for name, line, url, text in bar:
        per_file[name] = per_file.get(name, 0) + 1
        ids = index.matched_examples(text)
        if ids:
            contaminated_docs += 1
        for eid in ids:
            found.setdefault(eid, []).append((name, line, url))
    return found, {"files": per_file, "contaminated_documents": contaminated_docs}


def build_report(specs: list[str], n: int, files: list[str], progress: bool = False) -> dict:
    from c4forge.contamination.benchmarks import load

    index, prints = load(specs, n, keep_owners=True)
    found, corpus = scan(files, index, progress)
    benchmarks: dict[str, Any] = {}
    for eid, ex in enumerate(index.examples or []):
        b = benchmarks.setdefault(ex.benchmark, {**prints[ex.benchmark], "splits": {}})
        s = b["splits"].setdefault(
            ex.split, {"examples": 0, "contaminated": 0, "share": 0.0, "contaminated_examples": []}
        )
        s["examples"] += 1
        docs = found.get(eid)
        if docs:
            s["contaminated"] += 1
            s["contaminated_examples"].append(
                {
                    "index": ex.index,
                    "line": ex.line,
                    "text": " ||| ".join(ex.texts),
                    "documents": len(docs),
                    "found_in": [
                        {"file": f, "line": ln, "url": u} for f, ln, u in docs[:MAX_DOCS_LISTED]
                    ],
                }
            )
    for b in benchmarks.values():
        for s in b["splits"].values():
            s["share"] = round(s["contaminated"] / s["examples"], 6) if s["examples"] else 0.0
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "n": n,
        "corpus": {
            "files": [
                {
                    "file": os.path.basename(f),
                    "documents": corpus["files"].get(os.path.basename(f), 0),
                }
                for f in files
            ],
            "documents": sum(corpus["files"].values()),
            "contaminated_documents": corpus["contaminated_documents"],
        },
        "benchmarks": benchmarks,
    }


def render_md(report: dict) -> str:
    c = report["corpus"]
    lines = [
        "# Evaluation-set contamination",
        "",
        f"Corpus: {c['documents']:,} documents in {len(c['files'])} file(s); "
        f"{c['contaminated_documents']:,} share a word {report['n']}-gram with an evaluation "
        "example (text lower-cased, punctuation and whitespace collapsed).",
        "",
        "| benchmark | split | examples | contaminated | share |",
        "|---|---|---:|---:|---:|",
    ]
    for name, b in report["benchmarks"].items():
        for split, s in b["splits"].items():
            lines.append(
                f"| {name} | {split} | {s['examples']:,} | {s['contaminated']:,} | "
                f"{100 * s['share']:.2f}% |"
            )
    for name, b in report["benchmarks"].items():
        for split, s in b["splits"].items():
            if not s["contaminated_examples"]:
                continue
            lines += ["", f"## {name} / {split}", ""]
            for ex in s["contaminated_examples"]:
                text = ex["text"].replace("|", "\\|").replace("\n", " ")
                where = ", ".join(
                    f"{d['file']}:{d['line']}" + (f" ({d['url']})" if d["url"] else "")
                    for d in ex["found_in"]
                )
                more = (
                    ""
                    if ex["documents"] <= len(ex["found_in"])
                    else f" and {ex['documents'] - len(ex['found_in'])} more"
                )
                lines.append(f"- example {ex['index']} (line {ex['line']}): {text[:300]}")
                lines.append(f"  - in {ex['documents']} document(s): {where}{more}")
    return "\n".join(lines) + "\n"


@ownership.owns_output("contamination", lambda report, out_dir: out_dir)
def write_report(report: dict, out_dir: str) -> tuple[str, str]:
    storage.makedirs(out_dir)
    jpath, mpath = os.path.join(out_dir, JSON_NAME), os.path.join(out_dir, MD_NAME)
    storage.atomic_write_text(jpath, storage.dumps_pretty(report))
    storage.atomic_write_text(mpath, render_md(report))
    return jpath, mpath


def read_report(path: str) -> dict:
    """A contamination.json (or the folder holding one), format-checked."""
    if os.path.isdir(path):
        path = os.path.join(path, JSON_NAME)
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such contamination report")
    obj = storage.read_json(path)
    storage.check_format(obj, path, FORMAT)
    return obj
