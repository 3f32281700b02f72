"""Resumable Beam runs: `c4forge clean --resume` killed with SIGKILL mid-run, resumed,
byte-identical to an uninterrupted run without --resume; a finished run is not recomputed.

Inputs: six WET files written with warcio from real C4 pages (clean_fixtures), plus a genuine
Common Crawl WET excerpt. The pages are spread so that the corpus-wide steps cross files: a
URL whose older copy (another file) clean would drop, a URL whose *newer* copy clean drops, and
a paragraph shared by pages in three files (span dedup).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clean_fixtures import GENUINE_WET_DIR, REPO, c4_docs, doc_records, span_scenario, wet_bytes

from c4forge.clean import resume_state
from c4forge.corpus.counting import CounterBag

FILES = 6
PER_FILE = 30


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("inputs")
    docs = c4_docs(0, FILES * PER_FILE + 6)
    per_file = [docs[i * PER_FILE : (i + 1) * PER_FILE] for i in range(FILES)]
    extra = docs[FILES * PER_FILE :]
    # URL dedup across files: the older copy (file 4) is one short line clean would drop; the
    # newer copy (file 1) is kept. Its clean counters must not reach stats.json.
    a = extra[0]
    per_file[1].append(dict(a, date="2019-07-20T00:00:00Z"))
    per_file[4].append(
        dict(a, url=a["url"] + "?utm_source=feed", date="2000-01-01T00:00:00Z", text="Short.")
    )
    # The newer copy (file 2) is dropped by clean: the page is gone, its counters count.
    b = extra[1]
    per_file[2].append(dict(b, date="2019-07-21T00:00:00Z", text="Click here"))
    per_file[5].append(dict(b, date="2000-01-01T00:00:00Z"))
    # One real paragraph on pages in files 0, 3 and 5: span dedup keeps it on one of them.
    pages, _, _ = span_scenario(extra[2:5], donor=extra[5])
    for i, page in zip((0, 3, 5), pages, strict=True):
        per_file[i].append(page)
    for i, group in enumerate(per_file):
        (d / f"part-{i}.warc.wet.gz").write_bytes(wet_bytes(doc_records(group)))
    genuine = next(n for n in sorted(os.listdir(GENUINE_WET_DIR)) if ".wet" in n)
    shutil.copy(os.path.join(GENUINE_WET_DIR, genuine), d / genuine)
    return d


def _cmd(inputs: Path, out: Path, *extra: str) -> list[str]:
    beam = ["--engine", "beam"]  # the default picks the local engine on this machine
    return [sys.executable, "-m", "c4forge", "clean", str(inputs), "-o", str(out), *beam, *extra]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=300)


def _records(out: Path) -> list[Path]:
    work = out / "_work"
    return sorted(work.glob("chunk-*.json")) if work.is_dir() else []


@pytest.fixture(scope="module")
def uninterrupted(inputs, tmp_path_factory) -> Path:
    """The reference: the plain pipeline (no --resume), one worker."""
    out = tmp_path_factory.mktemp("ref") / "out"
    done = _run(_cmd(inputs, out, "--workers", "1", "--quiet"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (out / "_work").exists()
    return out


def _same_output(a: Path, b: Path) -> dict:
    assert (a / "stats.json").read_bytes() == (b / "stats.json").read_bytes()
    stats = json.loads((a / "stats.json").read_text())
    for split in stats["outputs"].values():
        for f in split["files"]:
            assert (a / f["file"]).read_bytes() == (b / f["file"]).read_bytes(), f["file"]
    return stats


def test_killed_run_resumes_to_the_same_output(inputs, uninterrupted, tmp_path) -> None:
    out = tmp_path / "resumed"
    proc = subprocess.Popen(
        _cmd(inputs, out, "--resume", "--workers", "2"),
        env=_env(),
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 200
    while not _records(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its SDK worker processes, mid-run
    proc.wait()
    done = _records(out)
    assert done, "the run never finished an input"
    assert not (out / "stats.json").exists(), "the run finished before it could be killed"

    # A different job must not pick up these chunks.
    other = _run(_cmd(inputs, out, "--resume", "--dedup", "lines", "--quiet"))
    assert other.returncode == 2 and "without --resume" in other.stderr
    assert _records(out) == done

    # Damage two chunks as a kill at a worse moment would: a record lost after its data was
    # written (→ redone, counted once), and data of an unrecorded chunk (→ removed, redone).
    total = FILES + 1
    print(f"killed with {len(done)} of {total} inputs recorded")
    skipped = len(done)
    if len(done) >= 2:
        done[-1].unlink()
        skipped -= 1
    job = json.loads((out / "_work" / "job.json").read_text())
    files = [
        resume_state.InputFile(
            f["path"], f["size"], f.get("version", "")
        )  # as recorded, mtime included
        for chunk in job["inputs"]
        for f in chunk
    ]
    assert len(files) == total and job["engine"] == "beam"
    chunks = resume_state.plan_chunks(files, 1)
    work = resume_state.WorkDir(str(out), resume_state.BEAM_DATA_SUFFIX)
    torn = next(c for c in chunks if work.done(c) is None)
    Path(work.data_path(torn)).write_bytes(gzip.compress(b'{"page": "cut'))

    resumed = _run(_cmd(inputs, out, "--resume", "--workers", "2"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        f"--resume: {skipped} chunk(s) done by an earlier run, skipped; "
        f"{total - skipped} processed now" in resumed.stderr
    )
    assert not (out / "_work").exists()
    stats = _same_output(out, uninterrupted)
    assert stats["conservation_errors"] == []
    assert "resume" not in json.dumps(stats["config"])
    assert stats["counters"]["url_dedup"]["duplicate_url"] >= 2
    assert stats["counters"]["dedup"]["duplicate_sentence"] >= 2
    assert stats["totals"]["documents_out"] >= 100


def test_resume_from_the_start_then_on_a_complete_run(inputs, uninterrupted, tmp_path) -> None:
    out = tmp_path / "out"
    first = _run(_cmd(inputs, out, "--resume", "--workers", "2"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "--resume: recording progress in" in first.stderr
    assert f"0 chunk(s) done by an earlier run, skipped; {FILES + 1} processed now" in first.stderr
    _same_output(out, uninterrupted)
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()}

    again = _run(_cmd(inputs, out, "--resume"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing recomputed" in again.stdout
    after = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in out.iterdir()}
    assert after == before  # no file touched, no _work created


def test_chunk_front_resumes_and_counts_the_survivor_only(tmp_path) -> None:
    """The front of one chunk (every engine's): its URL entries carry no text; called again
    (the chunk's record exists) it re-emits the same entries and counters without reading the
    input; URL dedup keeps the newer copy, and pass 0 counts the clean counters of that
    survivor only (the dropped older copy's counters vanish with it)."""
    from c4forge.clean import passes
    from c4forge.clean.config import CleanJob
    from c4forge.clean.plan import build_plan
    from c4forge.dedup import urls

    doc = c4_docs(0, 1)[0]
    older = dict(doc, url=doc["url"] + "?utm_source=x", date="2000-01-01T00:00:00Z", text="Short.")
    wet = tmp_path / "in.warc.wet.gz"
    wet.write_bytes(wet_bytes(doc_records([dict(doc, date="2019-07-20T00:00:00Z"), older])))
    out = str(tmp_path / "out")
    (chunk,) = resume_state.plan_chunks([resume_state.InputFile(str(wet), wet.stat().st_size)], 1)
    for dedup in ("spans", "lines"):
        plan = build_plan(CleanJob((str(wet),), out, dedup=dedup))
        resume_state.WorkDir(out).start({"engine": "test", "dedup": dedup}, resume=False)
        first = CounterBag()
        entries = list(passes.front(chunk, first, plan=plan, output=out))
        assert len(entries) == 2 and all(k == e.normalized_url for k, e in entries)
        assert first.counts.pop(resume_state.RESUME_NAMESPACE) == {"processed": 1}
        assert "clean" not in first.counts  # held per record, for the survivor only
        wet.rename(tmp_path / "moved")  # a done chunk is not read again
        again = CounterBag()
        assert list(passes.front(chunk, again, plan=plan, output=out)) == entries
        assert again.counts.pop(resume_state.RESUME_NAMESPACE) == {"skipped": 1}
        assert again.counts == first.counts
        (tmp_path / "moved").rename(wet)
        bag = CounterBag()
        (kept,) = urls.url_dedup(entries[0][0], [e for _, e in entries], bag)
        assert kept.timestamp == "2019-07-20T00:00:00Z"
        assert bag.counts == {"url_dedup": {"duplicate_url": 1, "passed": 1}}
        pass0 = CounterBag()
        keys = list(passes.chunk_pass(0, [chunk], [kept.loc[1]], pass0, plan=plan, output=out, k=0))
        assert keys  # the dedup keys of the one kept document
        clean = pass0.counts["clean"]
        assert clean["passed"] == 1 and not {"too_few_sentences", "loremipsum"} & set(clean)
