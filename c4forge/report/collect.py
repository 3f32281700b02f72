"""What the datasheet says, as one JSON-able dict (``report.json``): read from the clean
output's stats.json (documents, characters, funnel, languages, decontamination), one pass over
its shards (lengths, domains, TLDs, crawl months, tokens with a vocabulary), its
``samples/`` and, when given, a shard set's index.json and a contamination report.

The document and character totals are counted again from the shards and must equal
stats.json's (a datasheet that disagrees with its corpus is worse than none): a mismatch is a
``VerificationError``.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from c4forge.errors import InputError, VerificationError
from c4forge.formats.clean_docs import CLEAN_STATS_FORMAT, STATS_NAME
from c4forge.formats.shards import INDEX_NAME
from c4forge.io import storage
from c4forge.io.names import member_name

FORMAT = "c4forge.datasheet"  # report.json format name (kept as released)
FORMAT_VERSION = 1
TOP_DOMAINS = 50
TOP_TLDS = 20
SAMPLES_SHOWN = 3  # per drop reason, on the page (the files keep them all)
SAMPLE_CHARS = 600
HIST_BINS = 30


def host_of(url: str) -> str:
    """The URL's host, lower case, without ``www.`` (Dodge et al. count domains this way);
    URLs without a scheme (``example.com/x``) too."""
    u = url if "://" in url else "http://" + url
    try:
        host = (urlsplit(u).hostname or "").lower()
    except ValueError:
        host = ""
    return host[4:] if host.startswith("www.") else host


def tld_of(host: str) -> str:
    if not host or host.replace(".", "").isdigit():
        return "(none)" if not host else "(ip)"
    return host.rsplit(".", 1)[-1]


def describe(values: Iterable[float]) -> dict[str, float]:
    a = np.asarray(list(values), dtype=np.float64)
    if a.size == 0:
        return {"count": 0}
    return {
        "count": int(a.size),
        "mean": round(float(a.mean()), 3),
        "median": float(np.median(a)),
        "p10": float(np.percentile(a, 10)),
        "p90": float(np.percentile(a, 90)),
        "min": float(a.min()),
        "max": float(a.max()),
        "total": int(a.sum()),
    }


def histogram(values: list[int]) -> dict[str, list]:
    """Log-spaced bins (document lengths span orders of magnitude)."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {"edges": [], "counts": []}
    hi = max(float(a.max()), 1.0)
    edges = np.unique(np.round(np.geomspace(1, hi + 1, HIST_BINS + 1)))
    counts, edges = np.histogram(a, bins=edges)
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def shard_files(stats: Mapping, clean_dir: str) -> list[tuple[str, str]]:
    """``(split, path)`` of every shard stats.json lists, split by split."""
    out = []
    where = os.path.join(clean_dir, STATS_NAME)
    for split, block in stats["outputs"].items():
        for f in block["files"]:
            path = os.path.join(clean_dir, member_name(f["file"], where, f"{split} file"))
            if not os.path.isfile(path):
                raise InputError(f"{path}: listed in stats.json but missing")
            out.append((split, path))
    return out


def scan_documents(
    files: list[tuple[str, str]], vocab: Any = None, progress: bool = False
) -> dict[str, Any]:
    """One pass over the shards: per document characters, lines, sentences (Punkt), tokens;
    domains, TLDs, crawl months; documents and characters per split."""
    from c4forge.formats.clean_docs import iter_documents
    from c4forge.rules.sentences import split_sentences

    chars: list[int] = []
    lines: list[int] = []
    sentences: list[int] = []
    tokens: list[int] = []
    domains: Counter[str] = Counter()
    tlds: Counter[str] = Counter()
    months: Counter[str] = Counter()
    per_split: dict[str, dict[str, int]] = {}
    batch: list[str] = []

    def flush() -> None:
        if vocab is not None and batch:
            tokens.extend(len(ids) for ids in vocab.encode_batch(batch))
        batch.clear()

    docs = ((split, doc) for split, path in files for doc in iter_documents(path))
    from c4forge.progress import progress as progress_display

    for split, doc in progress_display(docs, desc="documents", unit="doc", disable=not progress):
        text = doc["text"]
        s = per_split.setdefault(split, {"documents": 0, "characters": 0})
        s["documents"] += 1
        s["characters"] += len(text)
        chars.append(len(text))
        doc_lines = text.split("\n")
        lines.append(len(doc_lines))
        sentences.append(sum(len(split_sentences(line)) for line in doc_lines if line))
        host = host_of(doc["url"])
        domains[host or "(no url)"] += 1
        tlds[tld_of(host)] += 1
        stamp = str(doc.get("timestamp") or doc.get("date") or "")
        months[stamp[:7] if len(stamp) >= 7 else "(unknown)"] += 1
        if vocab is not None:
            batch.append(text)
            if len(batch) >= 256:
                flush()
    flush()
    return {
        "chars": chars,
        "lines": lines,
        "sentences": sentences,
        "tokens": tokens if vocab is not None else None,
        "domains": domains,
        "tlds": tlds,
        "months": months,
        "per_split": per_split,
    }


def _top(counter: Counter[str], n: int) -> list[list[Any]]:
    return [[k, v] for k, v in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def funnel_rows(stats: Mapping) -> list[dict[str, Any]]:
    from c4forge.clean.summary import accounts_of, funnel

    config = stats["config"]
    steps = funnel(stats["counters"], config.get("input_format", "auto"), accounts_of(config))
    return [
        {
            "stage": s.stage,
            "title": s.title,
            "pages_in": s.pages_in,
            "pages_out": s.pages_out,
            "dropped": s.dropped,
            "drops": dict(sorted(s.drops.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
        for s in steps
    ]


def decontamination_block(stats: Mapping) -> dict[str, Any] | None:
    fingerprints = stats["config"].get("decontaminate")
    if not fingerprints:
        return None
    counters = stats["counters"].get("decontaminate", {})
    return {
        "documents_checked": counters.get("contaminated", 0) + counters.get("passed", 0),
        "documents_removed": counters.get("contaminated", 0),
        "benchmarks": {
            name: {
                "n": fp["n"],
                "examples": fp["examples"],
                "ngrams": fp["ngrams"],
                "grams_sha256": fp["grams_sha256"],
                "documents_removed": counters.get(f"contaminated:{name}", 0),
            }
            for name, fp in fingerprints.items()
        },
    }


def contamination_summary(report: Mapping) -> dict[str, Any]:
    return {
        "n": report["n"],
        "documents": report["corpus"]["documents"],
        "contaminated_documents": report["corpus"]["contaminated_documents"],
        "splits": [
            {
                "benchmark": name,
                "split": split,
                "examples": s["examples"],
                "contaminated": s["contaminated"],
                "share": s["share"],
            }
            for name, b in report["benchmarks"].items()
            for split, s in b["splits"].items()
        ],
    }


def samples_block(clean_dir: str) -> dict[str, Any]:
    from c4forge.clean.drop_samples import read_samples

    out = {}
    for key, recs in read_samples(clean_dir).items():
        out[key] = [
            {
                "url": r["url"],
                "text": r["text"][:SAMPLE_CHARS],
                "truncated": len(r["text"]) > SAMPLE_CHARS,
            }
            for r in recs[:SAMPLES_SHOWN]
        ]
    return out


def shards_block(shards_dir: str) -> dict[str, Any]:
    """Tokens per document, packing efficiency and padding, objective, vocabulary (index.json)."""
    path = os.path.join(shards_dir, INDEX_NAME)
    if not os.path.isfile(path):
        raise InputError(f"--shards {shards_dir}: no index.json (not a `c4forge shards` output)")
    index = storage.read_json(path)
    storage.check_format(index, path, "c4forge.shards")
    obj = index["objective"]
    splits = {}
    for split, st in index.get("stats", {}).items():
        rows = st.get("rows", 0)
        inputs_len = obj.get("inputs_length") or obj.get("tokens_length") or 0
        targets_len = obj.get("targets_length") or 0
        slots = rows * (inputs_len + targets_len)
        used = st.get("input_tokens", 0) + st.get("target_tokens", 0)
        docs = st.get("documents", 0)
        splits[split] = {
            "documents": docs,
            "rows": rows,
            "tokens": st.get("tokens", 0),
            "tokens_per_document": round(st.get("tokens", 0) / docs, 3) if docs else None,
            "packing_efficiency": round(used / slots, 6) if slots else None,
            "padding": round(1 - used / slots, 6) if slots else None,
        }
    vocab = index.get("vocabulary", {})
    return {
        "objective": obj.get("name"),
        "objective_config": obj,
        "vocabulary": {
            k: vocab.get(k) for k in ("num_pieces", "vocab_size", "extra_ids", "sha256")
        },
        "splits": splits,
        "dataset_fingerprint": index.get("dataset_fingerprint"),
    }


def collect(
    clean_dir: str,
    vocab_path: str | None = None,
    shards_dir: str | None = None,
    contamination_path: str | None = None,
    progress: bool = False,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(report, scan)``: the report.json dict and the raw per-document lists (for plots)."""
    stats_path = os.path.join(clean_dir, STATS_NAME)
    if not os.path.isfile(stats_path):
        raise InputError(f"{clean_dir}: no stats.json (not a finished `c4forge clean` output)")
    raw = open(stats_path, "rb").read()
    stats = storage.read_json(stats_path)
    storage.check_format(stats, stats_path, CLEAN_STATS_FORMAT)
    vocab = None
    if vocab_path:
        from c4forge.vocab.vocab import Vocabulary

        vocab = Vocabulary.load(vocab_path)
    scan = scan_documents(shard_files(stats, clean_dir), vocab, progress)
    for split, block in stats["outputs"].items():
        got = scan["per_split"].get(split, {"documents": 0, "characters": 0})
        if (got["documents"], got["characters"]) != (block["documents"], block["characters"]):
            raise VerificationError(
                f"{clean_dir}: {split} shards hold {got['documents']} documents / "
                f"{got['characters']} characters, stats.json says {block['documents']} / "
                f"{block['characters']}"
            )
    config = stats["config"]
    totals = stats["totals"]
    report: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "source": {
            "clean_dir": os.path.abspath(clean_dir),
            "stats_sha256": hashlib.sha256(raw).hexdigest(),
            "c4forge_version": stats.get("c4forge_version"),
        },
        "config": {
            "variant": config["variant"]["name"]
            if isinstance(config.get("variant"), dict)
            else config.get("variant"),
            "dedup": config.get("dedup"),
            "near_dedup": config.get("near_dedup"),
            "language": config.get("language"),
        },
        "totals": {
            "documents": totals["documents_out"],
            "characters": totals["characters_out"],
            "bytes": totals["bytes_out"],
            "pages_in": totals["pages_in"],
            "tokens": int(sum(scan["tokens"])) if scan["tokens"] is not None else None,
        },
        "splits": {
            s: {"documents": b["documents"], "characters": b["characters"]}
            for s, b in stats["outputs"].items()
        },
        "per_document": {
            "characters": describe(scan["chars"]),
            "lines": describe(scan["lines"]),
            "sentences": describe(scan["sentences"]),
        },
        "histograms": {
            "characters": histogram(scan["chars"]),
            "lines": histogram(scan["lines"]),
            "sentences": histogram(scan["sentences"]),
        },
        "domains": {"distinct": len(scan["domains"]), "top": _top(scan["domains"], TOP_DOMAINS)},
        "tlds": {"distinct": len(scan["tlds"]), "top": _top(scan["tlds"], TOP_TLDS)},
        "months": sorted([k, v] for k, v in scan["months"].items()),
        "funnel": funnel_rows(stats),
        "languages": stats.get("languages"),
        "decontamination": decontamination_block(stats),
        "contamination": None,
        "samples": samples_block(clean_dir),
        "shards": None,
    }
    if config.get("dedup_substrings"):  # only when run: other datasheets stay as they were
        report["config"]["dedup_substrings"] = config["dedup_substrings"]
    if scan["tokens"] is not None:
        report["per_document"]["tokens"] = describe(scan["tokens"])
        report["histograms"]["tokens"] = histogram(scan["tokens"])
        report["vocabulary"] = {
            "path": os.path.abspath(vocab_path),
            "sha256": vocab.sha256,
            "vocab_size": vocab.vocab_size,
        }
    if contamination_path:
        from c4forge.contamination.report import read_report

        report["contamination"] = contamination_summary(read_report(contamination_path))
    if shards_dir:
        report["shards"] = shards_block(shards_dir)
    return report, scan
