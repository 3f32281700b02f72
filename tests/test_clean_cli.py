"""`c4forge clean` through ``c4forge.cli.main``: user errors, lines dedup, Parquet, --report,
and a finished output folder (kept, refused or replaced).

User errors must come out as one line on stderr and exit status 2, before any pipeline starts
where the error is knowable from the arguments (missing path, empty glob, bad option).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket

import pytest
from clean_fixtures import (
    GENUINE_WET_DIR,
    c4_docs,
    doc_records,
    md5,
    reference_clean,
    wet_bytes,
    write,
)

from c4forge import cli
from c4forge.io.storage import read_json

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARC = os.path.join(REPO, "tests", "data", "warc", "whirlwind.warc.gz")


def clean(*argv: str) -> int:
    return cli.main(["clean", *argv])


# --- errors before the pipeline ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (["/nonexistent/file.warc.wet.gz"], "does not exist"),
        (["/nonexistent/dir/*.warc.wet.gz"], "matches no file"),
        ([os.path.join(REPO, "tests", "data", "warc")], "holds no input file"),
    ],
)
def test_input_errors_before_the_pipeline(tmp_path, capsys, inputs, message):
    out = tmp_path / "out"
    assert clean(*inputs, GENUINE_WET_DIR, "--output", str(out), "--input-format", "wet") == 2
    err = capsys.readouterr().err
    assert err.startswith("c4forge clean: error: ") and message in err
    assert "Traceback" not in err
    assert not out.exists()  # nothing started, nothing written


def test_path_list_with_a_missing_entry(tmp_path, capsys):
    paths = tmp_path / "paths.txt"
    wet = sorted(os.listdir(GENUINE_WET_DIR))[0]
    paths.write_text(f"{os.path.join(GENUINE_WET_DIR, wet)}\nmissing.warc.wet.gz\n")
    assert clean(f"@{paths}", "--output", str(tmp_path / "out")) == 2
    assert "missing.warc.wet.gz" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--train-shards", "zero"], "--train-shards"),
        (["--validation-shards", "0"], "--validation-shards"),
        (["--language", "xx"], "--language"),
        (["--workers", "0"], "--workers"),
    ],
)
def test_option_errors(tmp_path, capsys, option, message):
    assert clean(GENUINE_WET_DIR, "--output", str(tmp_path / "out"), *option) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--dedupe", "lines"],
            "unknown option '--dedupe'",
        ),  # a near-miss of --dedup is an error, not spans
        (["--direct_num_workers=two"], "bad Beam pipeline option"),
        (["--engine", "spark", "--project", "p"], "unknown option for the Spark engine"),
        (["--engine", "spark", "--conf", "executor.memory=4g"], "start with 'spark.'"),
    ],
)
def test_unknown_pass_through_options_fail_before_work(tmp_path, capsys, extra, message):
    """A misspelt option is a one-line error (exit 2) before any work, never a silently
    different corpus; no output folder is created."""
    out = tmp_path / "out"
    assert clean(GENUINE_WET_DIR, "--output", str(out), *extra) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert "did you mean --dedup" in err or "--dedupe" not in extra
    assert not out.exists()


def test_misspelt_option_from_a_shell_is_one_line(tmp_path):
    """As a user sees it: exit 2 and exactly one line on stderr (no Beam import noise)."""
    import subprocess
    import sys

    out = tmp_path / "out"
    argv = [sys.executable, "-m", "c4forge", "clean", GENUINE_WET_DIR, "-o", str(out)]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(cli.__file__)))
    proc = subprocess.run([*argv, "--dedupe", "lines"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "c4forge clean: error: unknown option '--dedupe': not a c4forge option and not a Beam "
        "pipeline option for runner DirectRunner (did you mean --dedup?)"
    ]
    assert not out.exists()


def test_shards_pass_through_options_are_checked(tmp_path, capsys):
    rc = cli.main(
        [
            "shards",
            str(tmp_path),
            "--vocab",
            str(tmp_path),
            "-o",
            str(tmp_path / "s"),
            "--objectve",
            "prefix_lm",
        ]
    )
    assert rc == 2
    assert "unknown option '--objectve'" in capsys.readouterr().err


def test_warc_of_responses_is_refused_with_a_clear_message(tmp_path, capsys):
    out = tmp_path / "out"
    rc = clean(WARC, "--output", str(out), "--workers", "1", "--input-format", "wet")
    err = capsys.readouterr().err
    assert rc == 2
    assert "whirlwind.warc.gz" in err and "WET" in err and "Traceback" not in err
    assert not (out / "stats.json").exists()


@pytest.mark.parametrize(
    "inputs",
    [
        [os.path.join(REPO, "README.md")],
        [os.path.join(GENUINE_WET_DIR, "LICENSE.*")],  # a glob that matches a non-WET file
    ],
)
def test_inputs_that_give_no_page_are_one_line_error(tmp_path, capsys, inputs):
    """No page at all is not an empty corpus: exit 2, one line naming the input and what it
    was, and nothing left in the output folder (this run made it)."""
    out = tmp_path / "out"
    assert clean(*inputs, "--output", str(out), "--workers", "1") == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("c4forge clean: error: ")]
    assert len(errors) == 1 and "no page read from 1 input file(s)" in errors[0], err
    assert "1 malformed" in errors[0] and "Traceback" not in err
    assert not out.exists()


def test_an_unreadable_input_among_good_ones_is_named_last(tmp_path, capsys):
    """Real WET files and a non-WET one: the corpus is built, and the summary's last line
    says one input gave nothing."""
    wet = [os.path.join(GENUINE_WET_DIR, n) for n in sorted(os.listdir(GENUINE_WET_DIR))]
    out = tmp_path / "out"
    assert clean(*wet, "--output", str(out), "--workers", "1") == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("  warning: not every input was read whole: of 3 input file(s)")
    assert "1 malformed" in last
    stats = read_json(str(out / "stats.json"))
    assert stats["counters"]["wet"]["malformed_file"] == 1 and stats["totals"]["pages_in"] > 0


# --- lines dedup, Parquet, report, finished output ----------------------------------------------


@pytest.fixture(scope="module")
def lines_case(tmp_path_factory):
    """Four real C4 pages; a real line from a fifth is added to three of them (twice to one)."""
    root = tmp_path_factory.mktemp("lines")
    docs = c4_docs(100, 5)
    shared = max(docs[4]["text"].split("\n"), key=len)
    pages = [dict(d) for d in docs[:4]]
    for i in (0, 1, 2):
        pages[i]["text"] += "\n" + shared
    pages[0]["text"] += "\n" + shared.upper()  # a local duplicate (keys are lowercased)
    owner = min((p["url"] for p in pages[:3]), key=md5)
    wet = write(str(root / "lines.warc.wet.gz"), wet_bytes(doc_records(pages)))
    out = str(root / "out")
    argv = [
        wet,
        "--output",
        out,
        "--dedup",
        "lines",
        "--format",
        "parquet",
        "--report",
        "--workers",
        "1",
    ]
    # Record every host name the job looks up: Beam 2.77's stock DirectRunner would first try
    # to download the Prism runner binary from GitHub; c4forge's runner must not touch the net.
    lookups: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def recording_getaddrinfo(host, *args, **kwargs):
        if host not in ("localhost", "127.0.0.1", "::1", None):
            lookups.append(str(host))
        return real_getaddrinfo(host, *args, **kwargs)

    socket.getaddrinfo = recording_getaddrinfo
    try:
        assert clean(*argv) == 0
    finally:
        socket.getaddrinfo = real_getaddrinfo
    return {
        "lookups": lookups,
        "out": out,
        "argv": argv,
        "shared": shared,
        "owner": owner,
        "pages": pages,
        "wet": wet,
    }


def parquet_rows(out: str, split: str = "validation") -> list[dict]:
    """Rows of a split's only shard. The bundled C4 sample is C4 *validation* data: every URL
    satisfies §11, so its pages land in validation here too (the train shard is empty)."""
    import pyarrow.parquet as pq

    table = pq.read_table(os.path.join(out, f"c4-{split}.00000-of-00001.parquet"))
    assert table.column_names == ["text", "timestamp", "url"]
    return table.to_pylist()


def test_lines_dedup_owner_and_local_duplicates(lines_case):
    rows = parquet_rows(lines_case["out"])
    texts = {r["url"]: r["text"] for r in rows}
    shared = lines_case["shared"].strip().lower()
    holders = {u for u, t in texts.items() if shared in t.lower()}
    assert holders == {lines_case["owner"]}
    owner_lines = [x for x in texts[lines_case["owner"]].lower().split("\n") if x == shared]
    assert len(owner_lines) == 1
    stats = read_json(os.path.join(lines_case["out"], "stats.json"))
    assert stats["counters"]["dedup"]["global_duplicate"] >= 2
    assert stats["counters"]["dedup"]["local_duplicate"] >= (
        1 if lines_case["owner"] == lines_case["pages"][0]["url"] else 0
    )


def test_lines_run_matches_the_in_memory_driver(lines_case):
    counters, docs = reference_clean([lines_case["wet"]], "lines")
    stats = read_json(os.path.join(lines_case["out"], "stats.json"))
    assert stats["counters"] == counters
    got = sorted(parquet_rows(lines_case["out"]), key=lambda r: r["url"])
    assert got == sorted(
        ({k: d[k] for k in ("text", "timestamp", "url")} for d in docs), key=lambda r: r["url"]
    )


def test_no_network_lookup_during_a_local_run(lines_case):
    assert lines_case["lookups"] == []


def test_parquet_order_and_checksums(lines_case):
    out = lines_case["out"]
    rows = parquet_rows(out)
    assert [md5(r["url"]) for r in rows] == sorted(md5(r["url"]) for r in rows)
    stats = read_json(os.path.join(out, "stats.json"))
    assert parquet_rows(out, "train") == []
    (entry,) = stats["outputs"]["validation"]["files"]
    raw = open(os.path.join(out, entry["file"]), "rb").read()
    assert entry["sha256"] == hashlib.sha256(raw).hexdigest() and raw[:4] == b"PAR1"
    jsonl = "".join(
        json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in rows
    ).encode()
    assert entry["content_sha256"] == hashlib.sha256(jsonl).hexdigest()


def test_report_png(lines_case):
    png = os.path.join(lines_case["out"], "funnel.png")
    with open(png, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    assert width > 600 and height > 300


def test_finished_output_is_kept_refused_or_replaced(lines_case, tmp_path, capsys):
    out = os.path.join(tmp_path, "copy")
    shutil.copytree(lines_case["out"], out)
    argv = [out if a == lines_case["out"] else a for a in lines_case["argv"]]
    before = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}

    # Same inputs and configuration: not recomputed.
    capsys.readouterr()
    assert clean(*argv) == 0
    assert "already" in capsys.readouterr().out
    assert {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)} == before

    # Another configuration: refused without --overwrite, nothing touched.
    spans = [a for a in argv if a not in ("lines", "parquet", "--report")]
    spans = [a for a in spans if a not in ("--dedup", "--format")]
    assert clean(*spans) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == sorted(before)

    # With --overwrite: recomputed; the old Parquet shards are gone.
    assert clean(*spans, "--overwrite", "--quiet") == 0
    names = sorted(os.listdir(out))
    assert not [n for n in names if n.endswith(".parquet")]
    assert "c4-validation.00000-of-00001.json.gz" in names and "funnel.png" not in names
    assert read_json(os.path.join(out, "stats.json"))["config"]["dedup"] == "spans"


# --- pieces of the driver, without a pipeline ----------------------------------------------------


def test_resolve_inputs_sorts_dedups_and_reads_path_lists(tmp_path):
    from c4forge.io.inputs import inputs_block, resolve_inputs

    wet = sorted(
        os.path.join(GENUINE_WET_DIR, n) for n in os.listdir(GENUINE_WET_DIR) if ".wet" in n
    )
    listing = tmp_path / "wet.paths"
    rel = os.path.relpath(wet[1], tmp_path)
    listing.write_text(f"# comment\n\n{rel}\n{wet[0]}\n")
    files = resolve_inputs([wet[1], f"@{listing}", GENUINE_WET_DIR, wet[0] + "*"], "wet")
    assert [f.path for f in files] == wet  # each once, sorted, LICENSE not taken from the folder
    block = inputs_block(files)
    assert block["count"] == 2 and block["bytes"] == sum(os.path.getsize(p) for p in wet)
    assert block["names"] == sorted(os.path.basename(p) for p in wet)


def test_auto_shard_count_and_names():
    from c4forge.clean import output as clean_output

    assert [clean_output.auto_shards(n) for n in (0, 1, 356_000, 356_001)] == [1, 1, 1, 2]
    assert clean_output.shard_name("train", 3, 1024) == "c4-train.00003-of-01024.json.gz"
    assert (
        clean_output.shard_name("validation", 0, 8, "parquet")
        == "c4-validation.00000-of-00008.parquet"
    )


def test_user_error_is_recovered_from_a_worker_traceback():
    from c4forge.engines.errors import user_error_from
    from c4forge.errors import InputError

    remote = RuntimeError(
        "Traceback (most recent call last):\n  File ...\nc4forge.errors.InputError: x.warc.gz: "
        "not WET [while running 'wet']\n"
    )
    err = user_error_from(remote)
    assert isinstance(err, InputError) and str(err) == "x.warc.gz: not WET"
    assert user_error_from(RuntimeError("KeyError: 'boom'")) is None


def test_runner_option_passes_through_and_output_is_identical(lines_case, tmp_path):
    """`--runner` and unknown options go to Beam unchanged; another runner (Beam's legacy
    bundle-based DirectRunner) writes the same documents and the same stats.json."""
    out = str(tmp_path / "other-runner")
    argv = [out if a == lines_case["out"] else a for a in lines_case["argv"]]
    argv = [a for a in argv if a not in ("--workers", "1")]
    rc = clean(*argv, "--runner", "BundleBasedDirectRunner", "--direct_runner_bundle_repeat=0")
    assert rc == 0
    with open(os.path.join(out, "stats.json"), "rb") as a:
        with open(os.path.join(lines_case["out"], "stats.json"), "rb") as b:
            assert a.read() == b.read()


def test_dedup_none_skips_the_stage(lines_case, tmp_path):
    out = str(tmp_path / "none")
    assert (
        clean(lines_case["wet"], "--output", out, "--dedup", "none", "--workers", "1", "--quiet")
        == 0
    )
    stats = read_json(os.path.join(out, "stats.json"))
    assert "dedup" not in stats["counters"] and stats["conservation_errors"] == []
    counters, docs = reference_clean([lines_case["wet"]], "none")

    def nonzero(c: dict) -> dict:
        return {s: {r: n for r, n in rs.items() if n} for s, rs in c.items()}

    assert nonzero(stats["counters"]) == nonzero(counters)
    # Without dedup the shared line survives on every page that had it (twice on one).
    assert stats["outputs"]["validation"]["documents"] == len(docs) == 4


def test_a_clean_run_prints_only_our_lines(tmp_path):
    """Beam's import-time "apitools not found" warning is not the user's problem: a normal
    `c4forge clean` run's stderr holds no line that c4forge did not write."""
    import subprocess
    import sys

    wet = os.path.join(REPO, "tests", "data", "wet", "whirlwind.warc.wet.gz")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "c4forge",
            "clean",
            wet,
            "-o",
            str(tmp_path / "out"),
            "--workers",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "apitools" not in proc.stderr and "WARNING:root" not in proc.stderr, proc.stderr
    assert "c4forge clean: done" in proc.stdout + proc.stderr


def test_direct_runner_refuses_an_input_larger_than_memory(tmp_path, capsys, monkeypatch):
    """The DirectRunner holds every collection in memory, so `--engine beam` checks the
    input size against the machine's available memory before any work. The machine's
    MemAvailable is what is replaced here (a small machine), not the check."""
    from c4forge.clean import memory_fit

    monkeypatch.setattr(memory_fit, "available_memory", lambda: 256 << 20)
    out = tmp_path / "out"
    assert clean(GENUINE_WET_DIR, "--output", str(out), "--engine", "beam") == 2
    lines = capsys.readouterr().err.strip().splitlines()
    # the job's header line, then the one-line error (no traceback)
    assert len(lines) == 2 and lines[0].startswith("c4forge clean:")
    assert "holds every collection in memory" in lines[1] and "--engine local" in lines[1]
    assert not out.exists() or not any(out.iterdir())
