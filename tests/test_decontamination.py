"""Decontamination: real pages with real GLUE dev sentences planted in them.

The pages are 150 real C4 documents of the bundled sample (``clean_fixtures``); ten of them,
chosen deterministically, get one line from a GLUE dev example (two per benchmark). The
examples are chosen with an independent check (this file's own n-grams, not the package's)
so that no other dev example shares a 13-gram with them: then "exactly the planted examples"
is a well-defined expectation. The clean job runs on the real Beam pipeline (1 and 2 workers),
natively on Spark and on the in-process local engine, with ``--keep-samples`` too, and every
output folder must be byte-identical.
"""

from __future__ import annotations

import filecmp
import gzip
import json
import os
import re
from pathlib import Path

import pytest
from clean_fixtures import c4_docs, doc_records, wet_bytes

from c4forge.cli import main
from c4forge.contamination import ngrams
from c4forge.contamination.benchmarks import glue_sources, load_examples, parse_specs

N = 13
PLANT_EVERY = 13  # every 13th page (from the 4th) gets a planted line
PER_BENCHMARK = 2


def _words(text: str) -> list[str]:  # the rule, written again independently
    return re.sub(r"[^0-9a-zà-ÿ]+", " ", text.lower()).split()


def _grams(text: str) -> set[str]:
    w = _words(text)
    if len(w) >= N:
        return {" ".join(w[i : i + N]) for i in range(len(w) - N + 1)}
    return {" ".join(w)} if len(w) >= 8 else set()


def _plantable(text: str) -> bool:
    """Survives the C4 line rules as a line of its own (ends with a mark, ≥ 5 words, …)."""
    t = text.strip()
    low = t.lower()
    return (
        len(t.split()) >= 15
        and t.endswith((".", "!", "?"))
        and not t.endswith("...")
        and "{" not in t
        and "javascript" not in low
        and "lorem ipsum" not in low
        and not any(p in low for p in ("terms of use", "privacy policy", "cookie"))
        and t.isascii()
    )


def choose_examples() -> list[tuple[str, int, str]]:
    """(benchmark, row index, planted text): the first two plantable examples per benchmark
    whose grams no other dev example shares (checked against every field of every benchmark,
    including short whole fields contained in the planted text)."""
    examples = [ex for s in glue_sources() for ex in load_examples(s)]
    owners: dict[str, set[tuple[str, int]]] = {}
    shorts: list[tuple[tuple[str, int], str]] = []
    for ex in examples:
        for t in ex.texts:
            g = _grams(t)
            for x in g:
                owners.setdefault(x, set()).add((ex.benchmark, ex.index))
            if len(_words(t)) < N and g:
                shorts.append(((ex.benchmark, ex.index), " " + " ".join(_words(t)) + " "))
    chosen: list[tuple[str, int, str]] = []
    for bench in ("cola", "mrpc", "rte", "sst2", "stsb"):
        picked = 0
        for ex in (e for e in examples if e.benchmark == bench):
            text = ex.texts[-1]  # sentence2 of pairs: a short, self-contained sentence
            me = (bench, ex.index)
            if not _plantable(text) or len(_words(text)) < N:
                continue
            if any(owners[g] != {me} for g in _grams(text)):
                continue
            padded = " " + " ".join(_words(text)) + " "
            if any(who != me and s in padded for who, s in shorts):
                continue
            chosen.append((bench, ex.index, text.strip()))
            picked += 1
            if picked == PER_BENCHMARK:
                break
    return chosen


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("planted")
    docs = c4_docs(0, 150)
    plan: dict[str, tuple[str, int]] = {}
    for k, (bench, index, text) in enumerate(choose_examples()):
        doc = docs[3 + PLANT_EVERY * k]
        lines = doc["text"].split("\n")
        lines.insert(len(lines) // 2, text)  # a line of its own, mid-page
        doc["text"] = "\n".join(lines)
        plan[doc["url"]] = (bench, index)
    wet = root / "planted.warc.wet.gz"
    wet.write_bytes(wet_bytes(doc_records(docs)))
    return {"root": root, "wet": str(wet), "plan": plan, "urls": [d["url"] for d in docs]}


def _clean(planted: dict, name: str, *extra: str) -> Path:
    out = planted["root"] / name
    argv = ["clean", planted["wet"], "--output", str(out), "--quiet", *extra]
    assert main(argv) == 0
    return out


def _urls(out: Path) -> set[str]:
    urls = set()
    for f in sorted(out.glob("c4-*.json.gz")):
        with gzip.open(f, "rt", encoding="utf-8") as fh:
            urls |= {json.loads(line)["url"] for line in fh}
    return urls


def _same_tree(a: Path, b: Path) -> None:
    cmp = filecmp.dircmp(a, b)
    assert not cmp.left_only and not cmp.right_only, (cmp.left_only, cmp.right_only)
    for name in cmp.common_files:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for sub in cmp.common_dirs:
        _same_tree(a / sub, b / sub)


def test_choice_is_two_per_benchmark(planted: dict) -> None:
    benches = sorted(b for b, _ in planted["plan"].values())
    assert benches == sorted(["cola", "mrpc", "rte", "sst2", "stsb"] * PER_BENCHMARK)


def test_planted_documents_removed_exactly_on_every_engine(planted: dict) -> None:
    pytest.importorskip("pyspark")
    from c4forge.clean.config import CleanJob
    from c4forge.clean.driver import run_clean
    from c4forge.engines.local import LocalEngine

    opts = ("--decontaminate", "glue", "--keep-samples", "3")
    plain = _clean(planted, "plain", "--workers", "1")
    beam1 = _clean(planted, "beam1", "--workers", "1", *opts)
    beam2 = _clean(planted, "beam2", "--workers", "2", *opts)
    spark = _clean(planted, "spark", "--engine", "spark", "--workers", "2", *opts)
    local = planted["root"] / "local"
    job = CleanJob(
        (planted["wet"],), str(local), decontaminate=("glue",), keep_samples=3, quiet=True
    )
    assert run_clean(job, LocalEngine()) == 0

    # exactly the planted documents are gone, and every one of them
    kept_plain, kept = _urls(plain), _urls(beam1)
    assert set(planted["plan"]) <= kept_plain  # the planted lines survive cleaning
    assert kept_plain - kept == set(planted["plan"])
    # counted under the right benchmark
    stats = json.loads((beam1 / "stats.json").read_text())
    dc = stats["counters"]["decontaminate"]
    want: dict[str, int] = {}
    for bench, _ in planted["plan"].values():
        want[bench] = want.get(bench, 0) + 1
    got = {r.split(":", 1)[1]: n for r, n in dc.items() if r.startswith("contaminated:") and n}
    assert got == want
    assert dc["contaminated"] == len(planted["plan"])
    assert dc["passed"] == len(kept_plain) - len(planted["plan"])
    fp = stats["config"]["decontaminate"]
    assert sorted(fp) == ["cola", "mrpc", "rte", "sst2", "stsb"]
    assert all(v["n"] == N and len(v["grams_sha256"]) == 64 for v in fp.values())
    assert fp["sst2"]["files"][0]["sha256"] == (
        "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0"
    )
    # byte-identical: Beam 1 and 2 workers, Spark, the local engine (samples included)
    for other in (beam2, spark, local):
        _same_tree(beam1, other)
    assert (beam1 / "samples" / "index.json").is_file()
    # the funnel shows the stage
    from c4forge.clean.summary import funnel

    rows = {s.stage: s for s in funnel(stats["counters"])}
    assert rows["decontaminate"].dropped == len(planted["plan"])


def test_contamination_command_finds_exactly_the_planted_examples(
    planted: dict, tmp_path: Path
) -> None:
    plain = planted["root"] / "plain"
    if not plain.exists():
        _clean(planted, "plain", "--workers", "1")
    out = tmp_path / "report"
    assert main(["contamination", str(plain), "--eval", "glue", "-o", str(out), "--quiet"]) == 0
    rep = json.loads((out / "contamination.json").read_text())
    found = {
        (name, ex["index"]): [d["url"] for d in ex["found_in"]]
        for name, b in rep["benchmarks"].items()
        for s in b["splits"].values()
        for ex in s["contaminated_examples"]
    }
    expected = {v: [url] for url, v in planted["plan"].items()}
    assert found == expected
    assert rep["corpus"]["contaminated_documents"] == len(planted["plan"])
    assert rep["benchmarks"]["rte"]["splits"]["dev"]["examples"] == 277
    assert "| sst2 | dev | 872 | 2 |" in (out / "contamination.md").read_text()


def test_normalisation_matches_tokenised_and_plain_text() -> None:
    glue = "you do n't have to know about music to appreciate the film 's easygoing blend ."
    web = "You don't have to know about music to appreciate the film's easygoing blend!"
    assert ngrams.words(glue)[:3] == ["you", "do", "n"]
    index, _ = ngrams.build_index([("x", [ngrams.Example("x", "dev", 0, 1, (web,))])], 13, False)
    assert index.first_match("Intro.\n" + glue) == 0  # the same n-grams either way
    short = ngrams.field_grams("John left the party early because he was tired", 13)
    assert short == ["john left the party early because he was tired"]
    assert ngrams.field_grams("John left.", 13) == []


def test_benchmark_files_tsv_csv_jsonl(tmp_path: Path) -> None:
    sentence = (
        "the committee approved the new budget for the coming fiscal year after a long debate"
    )
    (tmp_path / "a.tsv").write_text(f"id\tquestion\n1\t{sentence}\n", encoding="utf-8")
    (tmp_path / "b.csv").write_text(f'text,label\n"{sentence}, again",1\n', encoding="utf-8")
    (tmp_path / "c.jsonl").write_text(json.dumps({"q": sentence}) + "\n", encoding="utf-8")
    specs = [f"a={tmp_path}/a.tsv#question", f"b={tmp_path}/b.csv", f"c={tmp_path}/c.jsonl#q"]
    from c4forge.contamination.benchmarks import load

    index, prints = load(specs, 13)
    assert list(prints) == ["a", "b", "c"]
    assert [p["examples"] for p in prints.values()] == [1, 1, 1]
    assert index.names[index.first_match("Report: " + sentence.upper() + ".")] == "a"
    assert [s.split for s in parse_specs(specs)] == ["a", "b", "c"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope", "expected glue or NAME=FILE"),
        ("x=/no/such/file.tsv", "no such file"),
        ("glue=/tmp/x.tsv", "not 'glue'"),
    ],
)
def test_bad_specs_are_one_line_errors(spec: str, message: str, tmp_path: Path, capsys) -> None:
    wet = tmp_path / "in.wet.gz"
    wet.write_bytes(wet_bytes(doc_records(c4_docs(0, 2))))
    code = main(["clean", str(wet), "-o", str(tmp_path / "o"), "--decontaminate", spec])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "o" / "stats.json")


def test_missing_text_field_names_the_fields(tmp_path: Path, capsys) -> None:
    (tmp_path / "d.jsonl").write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    out = tmp_path / "rep"
    code = main(
        [
            "contamination",
            str(tmp_path / "d.jsonl"),
            "--eval",
            f"d={tmp_path}/d.jsonl",
            "-o",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "no field 'text'" in err and "question, answer" in err


def test_decontaminate_before_the_input_does_not_swallow_it(planted: dict, tmp_path: Path) -> None:
    """``--decontaminate glue IN -o OUT`` (the flag before the input) once took IN as a second
    benchmark spec and stopped with "the following arguments are required: INPUT"."""
    out = tmp_path / "first"
    argv = [
        "clean",
        "--decontaminate",
        "glue",
        planted["wet"],
        "-o",
        str(out),
        "--quiet",
        "--engine",
        "local",
        "--workers",
        "1",
    ]
    assert main(argv) == 0
    assert _urls(out).isdisjoint(planted["plan"])  # every planted document removed
    stats = json.loads((out / "stats.json").read_text())
    assert stats["counters"]["decontaminate"]["contaminated"] == len(planted["plan"])
    assert sorted(stats["config"]["decontaminate"]) == ["cola", "mrpc", "rte", "sst2", "stsb"]


def test_decontaminate_specs_repeat_or_join_with_commas(tmp_path: Path) -> None:
    """Several benchmarks: the flag repeated, or specs joined with commas (a ``#FIELD,FIELD``
    list stays with its spec); each spelling parses to the same ordered specs."""
    from c4forge.clean.config import CleanJob
    from c4forge.cli import build_parser

    evals = tmp_path / "mine.jsonl"
    evals.write_text(json.dumps({"q": "a question", "a": "an answer"}) + "\n")
    want = ("glue", f"mine={evals}#q,a")
    spellings = [
        ["in.wet", "--decontaminate", "glue", "--decontaminate", f"mine={evals}#q,a"],
        ["--decontaminate", f"glue,mine={evals}#q,a", "in.wet"],
        ["--decontaminate", "glue", "--decontaminate", f"mine={evals}#q,a", "in.wet"],
    ]
    for spelling in spellings:
        args, extra = build_parser().parse_known_args(["clean", *spelling, "-o", "o"])
        job = CleanJob.from_args(args)
        assert (job.inputs, job.decontaminate, extra) == (("in.wet",), want, []), spelling
    assert [s.benchmark for s in parse_specs(want)][-1] == "mine"
    assert parse_specs(want)[-1].fields == ("q", "a")


def test_two_values_after_one_decontaminate_flag_say_how_to_give_both(tmp_path, capsys) -> None:
    """The one spelling the one-value flag no longer reads (``--decontaminate glue mine=F``
    after the inputs) is a one-line error that says how, before any work."""
    evals = tmp_path / "mine.jsonl"
    evals.write_text(json.dumps({"text": "an example"}) + "\n")
    wet = tmp_path / "in.wet.gz"
    wet.write_bytes(wet_bytes(doc_records(c4_docs(0, 2))))
    for engine in ("local", "beam"):
        argv = [
            "clean",
            str(wet),
            "-o",
            str(tmp_path / "o"),
            "--engine",
            engine,
            "--decontaminate",
            "glue",
            f"mine={evals}",
        ]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "repeat the option, or join a list with commas" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()
