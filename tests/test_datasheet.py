"""`c4forge report`, read the way a person reads it.

Browser-free (always runs): the page parsed with ``html.parser``: every listed section is there,
every image is an inlined PNG whose chunks (CRC) and pixel data (zlib) decode, nothing points
to the network; the numbers in the HTML, report.json and README.md agree with stats.json.

In a real browser (Debian's ``chromium``, found on PATH or as ``$C4FORGE_CHROMIUM``; skipped
with the reason when absent, as in CI): the page is loaded headless, its DOM dumped after load
(the page's own check writes how many images decoded, which sections are missing and any
script error into ``#render-check``), a screenshot taken; and a deliberately broken copy must
be reported broken, so the check itself can fail.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from datasheet_fixtures import demo_report, multilingual_report

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return demo_report(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("gcld3")
    return multilingual_report(tmp_path_factory.mktemp("multi"))


class Page(HTMLParser):
    """Sections, images, data-key numbers and external references of a report page."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.listed: list[str] = []
        self.images: list[str] = []
        self.numbers: dict[str, str] = {}
        self.external: list[str] = []
        self.check: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section":
            self.sections.append(a["id"])
        if tag == "meta" and a.get("name") == "c4forge-sections":
            self.listed = a["content"].split(",")
        if tag == "img":
            self.images.append(a["src"])
        if "data-key" in a:
            self.numbers[a["data-key"]] = a["data-value"]
        if a.get("id") == "render-check":
            self.check = a
        for attr in ("src", "href"):
            v = a.get(attr, "")
            if v and not v.startswith(("data:", "#")):
                self.external.append(v)


def parse(path: Path) -> Page:
    p = Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def check_png(data: bytes) -> tuple[int, int]:
    """Every chunk's CRC, IHDR, the IDAT stream inflating to the expected size, IEND last."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, idat = 8, [], b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        chunks.append(kind)
        if kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert chunks[0] == b"IHDR" and chunks[-1] == b"IEND"
    ihdr = data[16:29]
    width, height, depth, color = struct.unpack(">IIBB", ihdr[:10])
    assert width > 0 and height > 0
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    raw = zlib.decompress(idat)
    assert len(raw) == height * (1 + (width * channels * depth + 7) // 8)
    return width, height


def md_rows(text: str) -> dict[str, list[str]]:
    """First cell → the other cells, for every markdown table row."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows.setdefault(cells[0], cells[1:])
    return rows


def num(s: str) -> float:
    return float(s.replace(",", "").rstrip("%"))


def expected_numbers(stats: dict) -> dict[str, int]:
    """The numbers every rendering must show, straight from stats.json."""
    from c4forge.clean.summary import accounts_of, funnel

    out = {
        "totals.documents": stats["totals"]["documents_out"],
        "totals.characters": stats["totals"]["characters_out"],
        "totals.bytes": stats["totals"]["bytes_out"],
        "totals.pages_in": stats["totals"]["pages_in"],
    }
    for split, b in stats["outputs"].items():
        out[f"splits.{split}.documents"] = b["documents"]
        out[f"splits.{split}.characters"] = b["characters"]
    c = stats["counters"]
    flows = dict(accounts_of(stats["config"]))
    for step in funnel(c, "auto", accounts_of(stats["config"])):
        out[f"funnel.{step.stage}.pages_out"] = sum(
            c[step.stage].get(r, 0) for r in flows[step.stage].kept
        )
        out[f"funnel.{step.stage}.pages_in"] = step.pages_in
    for name in stats["config"].get("decontaminate", {}):
        out[f"decontamination.{name}.documents_removed"] = c["decontaminate"].get(
            f"contaminated:{name}", 0
        )
    for lang, v in stats.get("languages", {}).items():
        out[f"languages.{lang}.documents"] = v["documents"]
    return out


def report_value(report: dict, key: str) -> float:
    parts = key.split(".")
    if parts[0] == "funnel":
        row = next(r for r in report["funnel"] if r["stage"] == parts[1])
        return row[parts[2]]
    if parts[0] == "decontamination":
        return report["decontamination"]["benchmarks"][parts[1]][parts[2]]
    node = report
    for p in parts:
        node = node[p]
    return node


def check_report(out: dict[str, Path]) -> Page:
    stats = json.loads((out["clean"] / "stats.json").read_text())
    report = json.loads((out["report"] / "report.json").read_text())
    page = parse(out["report"] / "index.html")
    readme = (out["report"] / "README.md").read_text()
    # sections and images
    assert page.listed and page.sections == page.listed
    for want in ("overview", "lengths", "domains", "months", "funnel", "samples"):
        assert want in page.sections
    assert not page.external, page.external
    assert len(page.images) == len(report["figures"]) >= 7
    for src in page.images:
        assert src.startswith("data:image/png;base64,")
        check_png(base64.b64decode(src.split(",", 1)[1]))
    for name in report["figures"]:  # the PNG files next to the page are the same images
        data = (out["report"] / name).read_bytes()
        check_png(data)
        assert "data:image/png;base64," + base64.b64encode(data).decode() in page.images
    # numbers: HTML, report.json and README.md against stats.json
    expected = expected_numbers(stats)
    rows = md_rows(readme)
    labels = {
        "totals.documents": "documents",
        "totals.characters": "characters",
        "totals.bytes": "bytes (compressed shards)",
        "totals.pages_in": "pages read",
    }
    titles = {r["stage"]: r["title"] for r in report["funnel"]}
    for key, value in expected.items():
        assert num(page.numbers[key]) == value, key
        assert report_value(report, key) == value, key
        parts = key.split(".")
        if key in labels:
            assert num(rows[labels[key]][0]) == value, key
        elif parts[0] == "splits":
            assert num(rows[parts[1]][0 if parts[2] == "documents" else 1]) == value, key
        elif parts[0] == "funnel":
            assert num(rows[titles[parts[1]]][0 if parts[2] == "pages_in" else 1]) == value, key
        elif parts[0] == "decontamination":
            assert num(rows[parts[1]][3]) == value, key
        elif parts[0] == "languages":
            assert num(rows[parts[1]][0]) == value, key
    return page


def test_demo_report_numbers_sections_and_images(demo: dict[str, Path]) -> None:
    page = check_report(demo)
    report = json.loads((demo["report"] / "report.json").read_text())
    assert "contamination" in page.sections and "shards" in page.sections
    # tokens: the report's own count equals the shard job's
    index = json.loads((demo["report"].parent / "shards" / "index.json").read_text())
    assert report["totals"]["tokens"] == sum(s["tokens"] for s in index["stats"].values())
    assert report["totals"]["tokens"] == num(page.numbers["totals.tokens"])
    s = report["shards"]["splits"]["train"]
    assert 0.9 < s["packing_efficiency"] <= 1 and s["padding"] == pytest.approx(
        1 - s["packing_efficiency"]
    )
    # samples of what each rule removed, from OUTPUT/samples (3 per reason)
    assert report["samples"]["clean/too_short"] and len(report["samples"]["clean/too_short"]) == 3
    assert report["domains"]["top"][0][1] >= report["domains"]["top"][-1][1]
    assert sum(n for _, n in report["months"]) == report["totals"]["documents"]
    assert readme_header(demo)["license"] == "other"


def readme_header(out: dict[str, Path]) -> dict[str, str]:
    text = (out["report"] / "README.md").read_text()
    head = text.split("---\n")[1]
    return dict(re.findall(r"^(\w+): (.+)$", head, re.M))


def test_multilingual_report(multi: dict[str, Path]) -> None:
    page = check_report(multi)
    assert "languages" in page.sections
    report = json.loads((multi["report"] / "report.json").read_text())
    assert "languages.png" in report["figures"]
    assert (
        sum(v["documents"] for v in report["languages"].values()) == report["totals"]["documents"]
    )


def test_report_of_a_folder_without_stats_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    from c4forge.cli import main

    assert main(["report", str(tmp_path), "-o", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "no stats.json" in err and "Traceback" not in err


# --------------------------------------------------------------------------- in a real browser


def chromium() -> str | None:
    return os.environ.get("C4FORGE_CHROMIUM") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )


def browse(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess:
    exe = chromium()
    if exe is None:
        pytest.skip("no chromium on PATH and C4FORGE_CHROMIUM unset (apt-get install chromium)")
    argv = [
        exe,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=10000",
        *extra,
        page.as_uri(),
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def rendered(page: Path, tmp_path: Path) -> tuple[dict[str, str], str]:
    """The page's own render check after load, and chromium's console log lines."""
    done = browse(page, tmp_path / "profile-dom", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = Page()
    dom.feed(done.stdout)
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line]
    return dom.check, "\n".join(console)


@pytest.mark.parametrize("which", ["demo", "multi"])
def test_report_renders_in_a_headless_browser(which: str, request, tmp_path: Path) -> None:
    if chromium() is None:
        pytest.skip("no chromium on PATH and C4FORGE_CHROMIUM unset (apt-get install chromium)")
    out = request.getfixturevalue(which)
    page = out["report"] / "index.html"
    check, console = rendered(page, tmp_path)
    expected = parse(page)
    assert check.get("data-done") == "1", "the page's script did not run"
    assert int(check["data-images"]) == len(expected.images)
    assert check["data-images-ok"] == check["data-images"], "an image did not decode"
    assert check["data-missing-sections"] == ""
    assert check["data-errors"] == "" and "Uncaught" not in console, console
    shot = tmp_path / "screenshot.png"
    done = browse(
        page, tmp_path / "profile-shot", f"--screenshot={shot}", "--window-size=1280,2400"
    )
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    width, height = check_png(shot.read_bytes())
    assert (width, height) == (1280, 2400)
    assert len(set(zlib.decompress(b"".join(_idat(shot.read_bytes()))))) > 16  # not a blank page


def _idat(data: bytes) -> list[bytes]:
    pos, out = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        if data[pos + 4 : pos + 8] == b"IDAT":
            out.append(data[pos + 8 : pos + 8 + length])
        pos += 12 + length
    return out


def test_browser_check_reports_a_broken_page(demo: dict[str, Path], tmp_path: Path) -> None:
    """The check can fail: a broken image, a removed section and a script error are seen."""
    if chromium() is None:
        pytest.skip("no chromium on PATH and C4FORGE_CHROMIUM unset (apt-get install chromium)")
    html = (demo["report"] / "index.html").read_text(encoding="utf-8")
    html = html.replace('<section id="months">', '<section id="gone">', 1)
    html = html.replace("<nav>", '<nav><img src="data:image/png;base64,iVBORw0KGgo=" alt="x">', 1)
    html = html.replace("</body>", "<script>notDefinedAnywhere();</script></body>", 1)
    broken = tmp_path / "broken.html"
    broken.write_text(html, encoding="utf-8")
    check, console = rendered(broken, tmp_path)
    assert int(check["data-images-ok"]) == int(check["data-images"]) - 1
    assert check["data-missing-sections"] == "months"
    assert "notDefinedAnywhere" in check["data-errors"] or "notDefinedAnywhere" in console
