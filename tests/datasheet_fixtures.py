"""Clean outputs and their datasheets for the report tests (``test_datasheet*.py``).

``demo_report``: the demo's corpus (the bundled real sample, 2,588 pages) cleaned with
``--keep-samples 3 --decontaminate glue``, a small vocabulary and span-corruption shards, then
`c4forge report` with ``--vocab`` and ``--shards``. ``multilingual_report``: the real
CC-MAIN-2019-30 pages cleaned as ``--variant multilingual`` (CLD3). Both run the real
subcommands (the local engine cleans, which is byte-identical to Beam and faster here).
"""

from __future__ import annotations

from pathlib import Path

from c4forge.cli import main


def clean_local(inputs: list[str], out: Path, **options) -> Path:
    from c4forge.clean.config import CleanJob
    from c4forge.clean.driver import run_clean
    from c4forge.engines.local import LocalEngine

    job = CleanJob(tuple(inputs), str(out), quiet=True, **options)
    assert run_clean(job, LocalEngine()) == 0
    return out


def demo_report(root: Path) -> dict[str, Path]:
    from c4forge.samples import demo_inputs

    inputs = demo_inputs(str(root / "input"))
    clean = clean_local(inputs, root / "clean", keep_samples=3, decontaminate=("glue",))
    vocab, shards, report = root / "vocab", root / "shards", root / "report"
    assert main(["vocab", str(clean), "-o", str(vocab), "--vocab-size", "500"]) == 0
    argv = ["shards", str(clean), "--vocab", str(vocab), "-o", str(shards)]
    assert main([*argv, "--inputs-length", "64", "--workers", "1"]) == 0
    argv = ["report", str(clean), "-o", str(report), "--vocab", str(vocab)]
    assert main([*argv, "--shards", str(shards), "--quiet"]) == 0
    return {"clean": clean, "report": report}


def multilingual_report(root: Path) -> dict[str, Path]:
    from c4forge.samples import dolma_sample_as_wet

    wet = dolma_sample_as_wet(str(root / "input"))
    clean = clean_local([wet], root / "clean", variant="multilingual", keep_samples=2)
    report = root / "report"
    assert main(["report", str(clean), "-o", str(report), "--quiet"]) == 0
    return {"clean": clean, "report": report}
