"""End-of-job summary and funnel chart of `c4forge clean`: every stage that ran, its numbers
taken from the counters, the conservation line, and a real PNG.

One real Beam job (crawl WARC input with a near-copy of each page, so MinHash removes pages)
through ``c4forge.cli.main``; the plain filter functions (``clean_fixtures.reference_clean``)
for the WET + exact-dedup rows.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import struct
import zlib
from pathlib import Path

import pytest
from clean_fixtures import GENUINE_WET_DIR, reference_clean
from warcio.archiveiterator import ArchiveIterator
from warcio.warcwriter import WARCWriter

from c4forge import cli
from c4forge.clean import summary
from c4forge.clean.funnel_chart import render_funnel_png
from c4forge.clean.plan import recorded_plan
from c4forge.corpus.counting import full_counters
from c4forge.io.storage import read_json

WARCS = sorted((Path(__file__).parent / "data" / "warc").glob("*.warc.gz"))
# A funnel row of the printed summary: title, pages in, pages out, kept %, reasons.
ROW = re.compile(r"^  (?P<title>\S.*?)\s{2,}(?P<in>[\d,]+)\s+(?P<out>[\d,]+)\s+[\d.]+%  ")


def mirror_warc(source: Path, target: Path) -> int:
    """Every response record of ``source`` again under another URL: exact near-duplicates
    for MinHash that URL dedup cannot see. Returns how many records were copied."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    n = 0
    with open(source, "rb") as f:
        for rec in ArchiveIterator(f, no_record_parse=True):
            if rec.rec_type != "response":
                continue
            record = writer.create_warc_record(
                f"https://mirror.example.org/copy-{n}",
                "response",
                payload=io.BytesIO(rec.raw_stream.read()),
                warc_headers_dict={"WARC-Date": rec.rec_headers.get_header("WARC-Date")},
            )
            writer.write_record(record)
            n += 1
    target.write_bytes(out.getvalue())
    return n


def rows(text: str) -> dict[str, tuple[int, int]]:
    """``{title: (in, out)}`` of the funnel table in the printed summary."""
    found = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            found[m["title"].strip()] = (
                int(m["in"].replace(",", "")),
                int(m["out"].replace(",", "")),
            )
    return found


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, after checking the signature and its CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16:29]
    (crc,) = struct.unpack(">I", data[29:33])
    assert zlib.crc32(kind + body) == crc
    width, height = struct.unpack(">II", body[:8])
    assert data.endswith(b"IEND\xaeB`\x82")
    return width, height


@pytest.fixture(scope="module")
def warc_run(tmp_path_factory) -> tuple[str, dict, Path]:
    """A real `clean` run: WARC input, no exact dedup (so the copies reach MinHash), report.
    Returns (printed summary, stats.json, output folder)."""
    root = tmp_path_factory.mktemp("warc_run")
    copies = mirror_warc(WARCS[1], root / "mirror.warc.gz")
    assert copies > 5
    out = root / "out"
    argv = [
        "clean",
        *map(str, WARCS),
        str(root / "mirror.warc.gz"),
        "-o",
        str(out),
        "--input-format",
        "warc",
        "--dedup",
        "none",
        "--near-dedup",
        "minhash",
        "--report",
        "--workers",
        "1",
    ]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(argv) == 0
    return printed.getvalue(), read_json(str(out / "stats.json")), out


def test_warc_near_dedup_summary_shows_every_stage(warc_run):
    text, stats, out = warc_run
    c = stats["counters"]
    assert c["near_dedup"]["removed"] > 0  # the mirror copies went
    found = rows(text)
    g = lambda stage, reason: c[stage][reason]  # noqa: E731
    # Every langid reason is a page outcome except the per-language breakdown.
    langid_total = sum(n for r, n in c["langid"].items() if ":" not in r)
    kept = g("badwords", "passed") + g("badwords", "soft_passed") + g("badwords", "no_list")
    # Expected rows straight from the counters (not from the summary's own funnel()).
    assert found == {
        "WARC records → pages (HTML → text)": (g("wet", "records"), g("wet", "pages")),
        "length ≤ 190,000 chars": (g("wet", "pages"), g("length", "passed")),
        "URL dedup": (g("length", "passed"), g("url_dedup", "passed")),
        "line & page rules": (g("url_dedup", "passed"), g("clean", "passed")),
        "near-dedup (MinHash)": (g("clean", "passed"), g("near_dedup", "passed")),
        "langdetect en ≥ 0.99": (langid_total, g("langid", "passed")),
        "bad words": (g("langid", "passed"), kept),
    }
    assert "near-dedup: minhash (5-grams, 128 permutations, Jaccard ≥ 0.8)" in text
    assert "input: WARC HTML → text (resiliparse); dedup: none" in text
    # The WARC reasons are in the wet row's drops, the near-dedup drop in its row.
    lines = text.splitlines()
    wet_row = next(line for line in lines if line.startswith("  WARC records"))
    assert f"non_response {g('wet', 'non_response'):,}" in wet_row
    nd_row = next(line for line in lines if line.startswith("  near-dedup"))
    assert f"removed {g('near_dedup', 'removed'):,}" in nd_row
    written = g("split", "train") + g("split", "validation")
    assert re.search(rf"^  written\s+{written:,}\s", text, re.M)
    assert "conservation check: OK (every page accounted for)" in text
    assert stats["conservation_errors"] == []


def test_funnel_png_is_a_real_drawn_image(warc_run):
    import matplotlib.image

    _, stats, out = warc_run
    png = (out / "funnel.png").read_bytes()
    width, height = png_size(png)
    assert 800 <= width <= 3000 and 400 <= height <= 2000, (width, height)
    assert render_funnel_png(stats) == png  # same counters, same bytes
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    assert pixels.shape[:2] == (height, width) and pixels.shape[2] in (3, 4)
    # Bars, labels and notes: many distinct colours, not a blank canvas.
    flat = (pixels[..., :3] * 255).astype("uint8").reshape(-1, 3)
    assert len({tuple(p) for p in flat[:: max(1, len(flat) // 20000)]}) > 20


def test_wet_exact_dedup_funnel_from_plain_functions():
    """The plain filter functions on real WET files: the dedup row (lines mode) is there, the
    near-dedup row is not, and each row's drops explain exactly its in − out."""
    paths = sorted(str(p) for p in Path(GENUINE_WET_DIR).iterdir() if ".warc.wet" in p.name)
    counters, docs = reference_clean(paths, "lines")
    c = full_counters(counters, recorded_plan({"dedup": "lines"}).accounts)
    steps = summary.funnel(c, "wet")  # no plan given: every stage any plan has
    assert [s.title for s in steps] == [
        "WET records → pages",
        "length ≤ 190,000 chars",
        "URL dedup",
        "line & page rules",
        "dedup",
        "langdetect en ≥ 0.99",
        "bad words",
    ]
    assert steps[0].pages_in == c["wet"]["records"] > 0
    for before, step in zip(steps, steps[1:]):
        assert step.pages_in == before.pages_out
    for step in steps:
        assert step.pages_in - step.pages_out == sum(step.drops.values()), step
    assert steps[-1].pages_out == len(docs)
    assert steps[4].detail.get("line_passed", 0) > 0


def test_failed_conservation_is_printed(warc_run):
    from c4forge.corpus.counting import conservation_errors as conservation

    _, stats, out = warc_run
    stats = json.loads(json.dumps(stats))
    stats["counters"]["near_dedup"]["passed"] += 1
    stats["conservation_errors"] = conservation(
        stats["counters"], recorded_plan(stats["config"]).accounts
    )
    assert len(stats["conservation_errors"]) == 2  # pages in, and what langid received
    text = summary.render(stats, str(out), 1.0)
    line = next(x for x in text.splitlines() if "conservation check" in x)
    assert "FAILED" in line and "clean.passed" in line and "near_dedup.passed" in line, line
