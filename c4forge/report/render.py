"""The datasheet as one self-contained HTML page and as a dataset-card README.md.

Both are rendered from the same report dict (report.json), so they cannot disagree. The page
needs no network: images are ``data:`` URIs, styles and the one small script are inline. Key
numbers carry ``data-key``/``data-value`` attributes (raw values next to the formatted text),
so tests can check them against stats.json without scraping formatted strings. The script
only checks the page itself (every image decoded, every listed section present) and writes
the result into ``#render-check``: a headless browser's DOM dump shows whether the page
rendered, with no driver library.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SECTION_TITLES = {
    "overview": "Overview",
    "lengths": "Document lengths",
    "domains": "Domains and top-level domains",
    "months": "Crawl dates",
    "funnel": "How the corpus was filtered",
    "languages": "Languages",
    "contamination": "Evaluation-set contamination",
    "samples": "What each rule removed",
    "shards": "Training shards",
}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:980px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.92em}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;display:block;margin:.6em 0}
nav a{margin-right:.8em}.muted{color:#777}
pre{white-space:pre-wrap;background:#f6f6f6;padding:.5em;border-radius:4px;font-size:.85em;
max-height:14em;overflow:auto}
#render-check{color:#777;font-size:.8em;margin-top:3em}
"""

SCRIPT = """
(function(){
  var errors=[];
  window.addEventListener('error',function(e){errors.push(String(e.message||e));});
  function check(){
    var imgs=Array.prototype.slice.call(document.images);
    var ok=imgs.filter(function(i){return i.complete&&i.naturalWidth>0;}).length;
    var want=(document.querySelector('meta[name=c4forge-sections]')||{}).content||'';
    var missing=want.split(',').filter(function(s){return s&&!document.getElementById(s);});
    var el=document.getElementById('render-check');
    el.setAttribute('data-images',imgs.length);
    el.setAttribute('data-images-ok',ok);
    el.setAttribute('data-missing-sections',missing.join(','));
    el.setAttribute('data-errors',errors.join(' | '));
    el.setAttribute('data-done','1');
    el.textContent='render check: '+ok+'/'+imgs.length+' images decoded; '+
      (missing.length?'missing sections: '+missing.join(','):'all sections present');
  }
  if(document.readyState==='complete'){check();}else{window.addEventListener('load',check);}
})();
"""


def fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return "–" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return (
            f"{v:,.0f}"
            if v.is_integer() and abs(v) >= 100
            else f"{v:,.3g}"
            if abs(v) < 100
            else f"{v:,.1f}"
        )
    return str(v)


def _num(key: str, value: Any) -> str:
    return (
        f'<td class="n" data-key="{html.escape(key)}" data-value="{html.escape(str(value))}">'
        f"{html.escape(fmt(value))}</td>"
    )


def _rows(
    prefix: str, items: Iterable[tuple[str, Mapping[str, Any]]], fields: Sequence[str]
) -> str:
    """One ``<tr>`` per ``(name, values)``: the name, then each field as a ``_num`` cell keyed
    ``prefix.name.field`` (what the browser-free test reads back)."""
    return "".join(
        f"<tr><td>{html.escape(name)}</td>"
        + "".join(_num(f"{prefix}.{name}.{f}", v[f]) for f in fields)
        + "</tr>"
        for name, v in items
    )


def _img(png: bytes, alt: str, name: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}" data-file="{name}">'


def sections_of(report: Mapping[str, Any]) -> list[str]:
    """The sections this report has, in page order."""
    out = ["overview", "lengths", "domains", "months", "funnel"]
    if report.get("languages"):
        out.append("languages")
    if report.get("decontamination") or report.get("contamination"):
        out.append("contamination")
    out.append("samples")
    if report.get("shards"):
        out.append("shards")
    return out


def _overview(r: Mapping[str, Any]) -> str:
    t = r["totals"]
    rows = [
        "<tr><th>documents</th>" + _num("totals.documents", t["documents"]) + "</tr>",
        "<tr><th>characters</th>" + _num("totals.characters", t["characters"]) + "</tr>",
        "<tr><th>bytes (compressed shards)</th>" + _num("totals.bytes", t["bytes"]) + "</tr>",
        "<tr><th>pages read</th>" + _num("totals.pages_in", t["pages_in"]) + "</tr>",
    ]
    if t.get("tokens") is not None:
        rows.append(
            "<tr><th>tokens (vocabulary)</th>" + _num("totals.tokens", t["tokens"]) + "</tr>"
        )
    split_rows = _rows("splits", r["splits"].items(), ("documents", "characters"))
    c = r["config"]
    substrings = c.get("dedup_substrings")
    exact = (
        f", exact substrings {int(substrings['bytes'])} bytes (keep "
        f"{html.escape(str(substrings['keep']))})"
        if substrings
        else ""
    )
    return (
        f"<p>Variant <b>{html.escape(str(c['variant']))}</b>, dedup {html.escape(str(c['dedup']))}, "
        f"near-dedup {html.escape(str(c['near_dedup']))}{exact}; built by c4forge "
        f"{html.escape(str(r['source']['c4forge_version']))} (stats.json sha256 "
        f"<code>{r['source']['stats_sha256'][:16]}…</code>).</p>"
        f"<table>{''.join(rows)}</table>"
        "<table><tr><th>split</th><th class=n>documents</th><th class=n>characters</th></tr>"
        f"{split_rows}</table>"
    )


def _stats_table(r: Mapping[str, Any]) -> str:
    cols = ["mean", "median", "p10", "p90", "min", "max"]
    rows = ""
    for name, d in r["per_document"].items():
        if not d.get("count"):
            continue
        rows += (
            f"<tr><th>{html.escape(name)}</th>"
            + "".join(_num(f"per_document.{name}.{k}", d[k]) for k in cols)
            + "</tr>"
        )
    head = "".join(f"<th class=n>{c}</th>" for c in cols)
    return f"<table><tr><th>per document</th>{head}</tr>{rows}</table>"


def _pairs_table(pairs: list[list[Any]], key: str, label: str, limit: int | None = None) -> str:
    rows = "".join(
        f"<tr><td>{i + 1}</td><td>{html.escape(str(k))}</td>" + _num(f"{key}.{k}", v) + "</tr>"
        for i, (k, v) in enumerate(pairs[:limit])
    )
    return f"<table><tr><th>#</th><th>{label}</th><th class=n>documents</th></tr>{rows}</table>"


def _funnel(r: Mapping[str, Any]) -> str:
    rows = ""
    for row in r["funnel"]:
        drops = ", ".join(f"{html.escape(k)} {v:,}" for k, v in list(row["drops"].items())[:4])
        rows += (
            f"<tr><td>{html.escape(row['title'])}</td>"
            + _num(f"funnel.{row['stage']}.pages_in", row["pages_in"])
            + _num(f"funnel.{row['stage']}.pages_out", row["pages_out"])
            + _num(f"funnel.{row['stage']}.dropped", row["dropped"])
            + f"<td>{drops or '–'}</td></tr>"
        )
    return (
        "<table><tr><th>stage</th><th class=n>in</th><th class=n>out</th>"
        f"<th class=n>dropped</th><th>main reasons</th></tr>{rows}</table>"
    )


def _languages(r: Mapping[str, Any]) -> str:
    by_size = sorted(r["languages"].items(), key=lambda kv: (-kv[1]["documents"], kv[0]))
    rows = _rows("languages", by_size, ("documents", "train", "validation"))
    return (
        "<table><tr><th>language</th><th class=n>documents</th><th class=n>train</th>"
        f"<th class=n>validation</th></tr>{rows}</table>"
    )


def _contamination(r: Mapping[str, Any]) -> str:
    out = ""
    d = r.get("decontamination")
    if d:
        fields = ("n", "examples", "ngrams", "documents_removed")
        rows = _rows("decontamination", d["benchmarks"].items(), fields)
        out += (
            "<p>Documents sharing a word n-gram with an evaluation example were removed while "
            f"cleaning: {d['documents_removed']:,} of {d['documents_checked']:,} checked.</p>"
            "<table><tr><th>benchmark</th><th class=n>n</th><th class=n>examples</th>"
            f"<th class=n>n-grams</th><th class=n>documents removed</th></tr>{rows}</table>"
        )
    c = r.get("contamination")
    if c:
        rows = "".join(
            f"<tr><td>{html.escape(s['benchmark'])}</td><td>{html.escape(s['split'])}</td>"
            + _num(f"contamination.{s['benchmark']}.{s['split']}.examples", s["examples"])
            + _num(f"contamination.{s['benchmark']}.{s['split']}.contaminated", s["contaminated"])
            + f"<td class=n>{100 * s['share']:.2f}%</td></tr>"
            for s in c["splits"]
        )
        out += (
            f"<p>Contamination report (n = {c['n']}): {c['contaminated_documents']:,} of "
            f"{c['documents']:,} documents hold an evaluation example.</p>"
            "<table><tr><th>benchmark</th><th>split</th><th class=n>examples</th>"
            f"<th class=n>contaminated</th><th class=n>share</th></tr>{rows}</table>"
        )
    return out


def _samples(r: Mapping[str, Any]) -> str:
    if not r["samples"]:
        return (
            '<p class="muted">No samples of dropped content in this output; run '
            "<code>c4forge clean … --keep-samples N</code> to keep N per drop reason.</p>"
        )
    parts = []
    for key, recs in r["samples"].items():
        items = "".join(
            f"<li><span class=muted>{html.escape(x['url'])}</span>"
            f"<pre>{html.escape(x['text'])}{'…' if x['truncated'] else ''}</pre></li>"
            for x in recs
        )
        parts.append(f"<h3>{html.escape(key)}</h3><ul>{items}</ul>")
    return "".join(parts)


def _shards(r: Mapping[str, Any]) -> str:
    s = r["shards"]
    fields = ("documents", "rows", "tokens_per_document", "packing_efficiency", "padding")
    rows = _rows("shards", s["splits"].items(), fields)
    v = s["vocabulary"]
    return (
        f"<p>Objective <b>{html.escape(str(s['objective']))}</b>; vocabulary "
        f"{fmt(v['num_pieces'])} pieces + {fmt(v['extra_ids'])} extra ids = "
        f"{fmt(v['vocab_size'])}.</p>"
        "<table><tr><th>split</th><th class=n>documents</th><th class=n>rows</th>"
        "<th class=n>tokens / document</th><th class=n>packing efficiency</th>"
        f"<th class=n>padding</th></tr>{rows}</table>"
    )


def render_html(report: Mapping[str, Any], pngs: Mapping[str, bytes], title: str) -> str:
    secs = sections_of(report)

    def imgs(*names: str) -> str:
        return "".join(_img(pngs[n], n[:-4], n) for n in names if n in pngs)

    body = {
        "overview": _overview(report),
        "lengths": _stats_table(report)
        + imgs("characters.png", "lines.png", "sentences.png", "tokens.png"),
        "domains": (
            f"<p>{report['domains']['distinct']:,} distinct domains, "
            f"{report['tlds']['distinct']:,} top-level domains.</p>"
            + imgs("domains.png", "tlds.png")
            + _pairs_table(report["domains"]["top"], "domains", "domain")
        ),
        "months": imgs("months.png") + _pairs_table(report["months"], "months", "month"),
        "funnel": imgs("funnel.png") + _funnel(report),
        "languages": imgs("languages.png") + _languages(report) if report.get("languages") else "",
        "contamination": _contamination(report),
        "samples": _samples(report),
        "shards": _shards(report) if report.get("shards") else "",
    }
    nav = "".join(f'<a href="#{s}">{SECTION_TITLES[s]}</a>' for s in secs)
    content = "".join(
        f'<section id="{s}"><h2>{SECTION_TITLES[s]}</h2>{body[s]}</section>' for s in secs
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="c4forge-sections" content="{",".join(secs)}">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><nav>{nav}</nav>{content}"
        '<div id="render-check">render check: script did not run</div>'
        f"<script>{SCRIPT}</script></body></html>\n"
    )


# --------------------------------------------------------------------------------- README.md


_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")  # an ``&`` a renderer would read as an entity
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md_text(text: str) -> str:
    """Crawled text (hosts, TLDs) as literal text in a markdown table cell: ``<``, ``>`` and an
    entity-like ``&`` HTML escaped (a host ``<img src=x onerror=…>`` renders as text, never as
    an element, on a dataset hub that renders the card), markdown's emphasis, link, code and
    table characters backslash-escaped (a ``|`` no longer splits the cell), line breaks as
    spaces."""
    text = _ENTITY.sub("&amp;", " ".join(text.splitlines()))  # "a & b" stays as it reads
    text = text.replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def _md_table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += [
        "| " + " | ".join(fmt(c) if not isinstance(c, str) else md_text(c) for c in r) + " |"
        for r in rows
    ]
    return out


def _size_category(n: int) -> str:
    for limit, name in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
        (10_000_000, "1M<n<10M"),
    ):
        if n < limit:
            return name
    return "n>1B" if n > 1_000_000_000 else "10M<n<100M" if n < 100_000_000 else "100M<n<1B"


def render_readme(report: Mapping[str, Any], title: str) -> str:
    """A Hugging Face dataset card (YAML header + markdown) with the report's numbers."""
    t = report["totals"]
    langs = (
        sorted(report["languages"])
        if report.get("languages")
        else [report["config"]["language"] or "en"]
    )
    split_files = "".join(f'  - split: {s}\n    path: "c4-{s}.*"\n' for s in report["splits"])
    lines = [
        "---",
        "language:",
        *[f"- {lang}" for lang in langs if lang != "und"],
        "license: other",
        f"pretty_name: {title}",
        "size_categories:",
        f"- {_size_category(t['documents'])}",
        "task_categories:",
        "- text-generation",
        "configs:",
        "- config_name: default",
        "  data_files:",
        split_files.rstrip("\n"),
        "---",
        "",
        f"# {title}",
        "",
        "A web-text corpus cleaned from Common Crawl with c4forge (the C4 rules); this card is "
        "written by `c4forge report` from the corpus's stats.json and shards. Common Crawl's "
        "terms of use apply to the text; C4 itself was released under ODC-BY.",
        "",
        "## Size",
        "",
    ]
    rows = [
        ["documents", t["documents"]],
        ["characters", t["characters"]],
        ["bytes (compressed shards)", t["bytes"]],
        ["pages read", t["pages_in"]],
    ]
    if t.get("tokens") is not None:
        rows.append(["tokens (vocabulary)", t["tokens"]])
    lines += _md_table(["", "value"], rows)
    lines += [""] + _md_table(
        ["split", "documents", "characters"],
        [[s, b["documents"], b["characters"]] for s, b in report["splits"].items()],
    )
    lines += ["", "## Document lengths", ""]
    cols = ["mean", "median", "p10", "p90", "min", "max"]
    lines += _md_table(
        ["per document", *cols],
        [[k, *[d[c] for c in cols]] for k, d in report["per_document"].items() if d.get("count")],
    )
    lines += ["", f"## Top domains ({report['domains']['distinct']:,} distinct)", ""]
    lines += _md_table(
        ["#", "domain", "documents"],
        [[i + 1, k, v] for i, (k, v) in enumerate(report["domains"]["top"][:20])],
    )
    lines += ["", "## Top-level domains", ""]
    lines += _md_table(["tld", "documents"], [[k, v] for k, v in report["tlds"]["top"]])
    lines += ["", "## Crawl months", ""]
    lines += _md_table(["month", "documents"], [[k, v] for k, v in report["months"]])
    lines += ["", "## Filtering", ""]
    lines += _md_table(
        ["stage", "in", "out", "dropped"],
        [
            [row["title"], row["pages_in"], row["pages_out"], row["dropped"]]
            for row in report["funnel"]
        ],
    )
    if report.get("languages"):
        lines += ["", "## Languages", ""]
        lines += _md_table(
            ["language", "documents", "train", "validation"],
            [
                [k, v["documents"], v["train"], v["validation"]]
                for k, v in sorted(
                    report["languages"].items(), key=lambda kv: (-kv[1]["documents"], kv[0])
                )
            ],
        )
    d, c = report.get("decontamination"), report.get("contamination")
    if d or c:
        lines += ["", "## Evaluation-set contamination", ""]
    if d:
        lines += _md_table(
            ["benchmark", "n", "examples", "n-grams", "documents removed"],
            [
                [k, b["n"], b["examples"], b["ngrams"], b["documents_removed"]]
                for k, b in d["benchmarks"].items()
            ],
        )
    if c:
        lines += [""] + _md_table(
            ["benchmark", "split", "examples", "contaminated", "share"],
            [
                [
                    s["benchmark"],
                    s["split"],
                    s["examples"],
                    s["contaminated"],
                    f"{100 * s['share']:.2f}%",
                ]
                for s in c["splits"]
            ],
        )
    if report.get("shards"):
        s = report["shards"]
        lines += ["", f"## Training shards ({s['objective']})", ""]
        lines += _md_table(
            ["split", "documents", "rows", "tokens / document", "packing efficiency", "padding"],
            [
                [
                    k,
                    v["documents"],
                    v["rows"],
                    v["tokens_per_document"],
                    v["packing_efficiency"],
                    v["padding"],
                ]
                for k, v in s["splits"].items()
            ],
        )
    lines += [
        "",
        "See `index.html` next to this card for the figures and samples of what each "
        "filter removed; `report.json` holds every number.",
        "",
    ]
    return "\n".join(lines)
