"""The dataset card (`c4forge report`'s README.md) shows crawled hosts as text.

Real C4 pages (the bundled sample) are put under hostile URL hosts, cleaned by the real clean
job and described by the real report command; the card's tables must hold each host as one
escaped cell: no raw HTML element, no ``|`` splitting a row.
"""

from __future__ import annotations

from pathlib import Path

from clean_fixtures import c4_docs, doc_records, wet_bytes, write
from datasheet_fixtures import clean_local

from c4forge.cli import main
from c4forge.report.render import md_text

HOSTILE = [
    "http://<img src=x onerror=alert(1)>/page",
    "http://a|b.example/page",
    "http://*bold*_x_.example/page",
    "http://[link](javascript:alert(1)).example/page",
]


def test_md_text_escapes_html_and_markdown() -> None:
    assert md_text("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;"
    assert md_text("a|b") == "a\\|b"
    assert md_text("*a*_b_`c`") == "\\*a\\*\\_b\\_\\`c\\`"
    assert md_text("line\nbreak") == "line break"
    assert md_text("en.wikipedia.org") == "en.wikipedia.org"  # ordinary hosts unchanged
    assert md_text("line & page rules") == "line & page rules"  # a plain "&" reads as itself
    assert md_text("&lt;b&gt;") == "&amp;lt;b&amp;gt;"  # an entity is shown, not decoded


def test_card_escapes_hostile_hosts(tmp_path: Path) -> None:
    docs = c4_docs(0, len(HOSTILE) + 2)
    for doc, url in zip(docs, HOSTILE, strict=False):
        doc["url"] = url
    wet = write(str(tmp_path / "hostile.warc.wet.gz"), wet_bytes(doc_records(docs)))
    clean = clean_local([wet], tmp_path / "clean")
    report = tmp_path / "report"
    assert main(["report", str(clean), "-o", str(report), "--quiet"]) == 0
    card = (report / "README.md").read_text()
    assert "<img" not in card and "&lt;img src=x onerror=alert(1)&gt;" in card
    domains = card.split("## Top domains")[1].split("##")[0]
    rows = [r for r in domains.splitlines() if r.startswith("| ") and "---" not in r]
    header, *body = rows
    for row in body:  # every row has exactly the header's cells: no unescaped "|"
        cells = row.replace("\\|", "").count("|")
        assert cells == header.count("|"), row
    assert any("a\\|b.example" in r for r in body)
    assert any("\\*bold\\*\\_x\\_.example" in r for r in body)
    assert "[link](" not in card
