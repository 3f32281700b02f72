"""One way to run a command from a program: ``c4forge.commands.run(request)`` takes a command's
typed request and returns its package's typed result, or raises; the chain (clean → vocab →
shards → train → finetune → evaluate) driven through it on the bundled real sample. And the
skeleton the clean and shards drivers share (``engines.job_driver``)."""

from __future__ import annotations

import dataclasses
import gzip
import importlib
import json
import os
from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET  # the bundled real sample's WET file
from finetune_fixtures import GLUE  # tests/data/glue: real GLUE rows (SOURCES.md there)

from c4forge import commands
from c4forge.clean.config import CleanJob
from c4forge.errors import C4ForgeError, InputError, OutputExistsError
from c4forge.finetune.options import EvaluateOptions, FinetuneOptions
from c4forge.io.storage import sha256
from c4forge.shards.job import ShardsJob
from c4forge.shards.tasks import TaskShardsRequest
from c4forge.trainers.cli_export import ExportOptions
from c4forge.trainers.options import TrainOptions
from c4forge.vocab.options import VocabOptions


def test_every_command_package_runs_its_requests_into_a_typed_result() -> None:
    """Each request type maps to its package's ``command`` module, which declares it and
    whose ``run`` returns a frozen dataclass with ``output``, ``text`` and ``fingerprint``."""
    packages = set()
    for name, module_name in commands.RUNNERS.items():
        module = importlib.import_module(module_name)
        assert name in {r.__name__ for r in module.REQUESTS}, (name, module_name)
        assert module.run is commands.runner_for(_bare(module, name))
        packages.add(module_name.rsplit(".", 1)[0])
        results = [
            v
            for v in vars(module).values()
            if isinstance(v, type)
            and v.__module__ == module.__name__
            and v.__name__.endswith("Result")
        ]
        assert results, module_name
        for result in results:
            assert dataclasses.is_dataclass(result) and result.__dataclass_params__.frozen
            assert "output" in {f.name for f in dataclasses.fields(result)}
            assert callable(result.text) and callable(result.fingerprint)
    assert packages == {
        "c4forge.clean",
        "c4forge.vocab",
        "c4forge.shards",
        "c4forge.trainers",
        "c4forge.finetune",
    }


def _bare(module, name: str):
    """An instance of request class ``name`` of ``module`` without running its validation
    (only its type matters to ``runner_for``)."""
    cls = next(r for r in module.REQUESTS if r.__name__ == name)
    return object.__new__(cls)


def test_what_is_no_request_is_refused() -> None:
    with pytest.raises(TypeError, match="dict is not a command's request"):
        commands.run({"output": "x"})


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """clean → vocab → shards → train through ``commands.run`` on the real sample WET file."""
    root = tmp_path_factory.mktemp("chain")
    clean = commands.run(
        CleanJob(inputs=(DERIVED_WET,), output=str(root / "clean"), quiet=True, workers=1)
    )
    vocab = commands.run(
        VocabOptions(docs=clean.output, output=str(root / "vocab"), vocab_size=600, quiet=True)
    )
    shards = commands.run(
        ShardsJob(
            docs=clean.output,
            vocab=vocab.output,
            output=str(root / "shards"),
            inputs_length=64,
            workers=1,
            quiet=True,
        )
    )
    train = commands.run(
        TrainOptions(
            shards=shards.output,
            output=str(root / "run"),
            preset="tiny",
            steps=2,
            batch_size=4,
            vocab=vocab.output,
            eval_rows=8,
            progress=False,
            device="cpu",
        )
    )
    return {"root": root, "clean": clean, "vocab": vocab, "shards": shards, "train": train}


def test_clean_result_is_what_the_folder_holds(chain: dict) -> None:
    clean = chain["clean"]
    folder = Path(clean.output)
    stats = json.loads((folder / "stats.json").read_text())
    assert clean.stats == stats
    assert clean.fingerprint() == sha256(str(folder / "stats.json"))
    assert clean.text() == ""  # the driver printed its own summary (here: quiet)
    written = {}
    for name in clean.files:
        with gzip.open(folder / name, "rt", encoding="utf-8") as f:
            written[name] = sum(1 for _ in f)
    assert sorted(clean.files) == sorted(p.name for p in folder.glob("c4-*.json.gz"))
    by_split = {"train": 0, "validation": 0}
    for name, n in written.items():
        by_split["validation" if "validation" in name else "train"] += n
    assert clean.documents == by_split
    assert clean.documents["train"] > 0


def test_a_finished_clean_is_served_with_the_same_result(chain: dict) -> None:
    clean = chain["clean"]
    again = commands.run(CleanJob(inputs=(DERIVED_WET,), output=clean.output, quiet=True))
    assert again == clean


def test_vocab_shards_and_train_results(chain: dict) -> None:
    vocab, shards, train = chain["vocab"], chain["shards"], chain["train"]
    desc = json.loads(Path(vocab.output, "vocab.json").read_text())
    assert vocab.fingerprint() == desc["sha256"]
    assert vocab.vocab_size == desc["vocab_size"]
    assert vocab.text().splitlines()[0] == f"vocabulary written to {vocab.output}"

    index = json.loads(Path(shards.output, "index.json").read_text())
    assert shards.index == index
    assert shards.fingerprint() == index["dataset_fingerprint"]
    assert shards.rows == {s: b["rows"] for s, b in index["splits"].items()}
    assert shards.rows["train"] > 0

    assert train.checkpoint is not None
    assert Path(train.checkpoint).name == "step-00000002"
    assert train.fingerprint() == sha256(os.path.join(train.checkpoint, "model.safetensors"))
    assert train.summary.steps == 2
    assert train.text() == train.summary.text()


def test_export_through_run(chain: dict) -> None:
    root, train = chain["root"], chain["train"]
    res = commands.run(ExportOptions(checkpoint=train.output, output=str(root / "hf")))
    assert res.summary["step"] == 2 and res.summary["architecture"] == "T5ForConditionalGeneration"
    assert "model.safetensors" in res.summary["files"]
    assert res.fingerprint() == sha256(str(root / "hf" / "model.safetensors"))
    assert res.text().splitlines()[0].startswith(f"exported {train.checkpoint} (step 2, ffn ")
    with pytest.raises(OutputExistsError):  # an HF folder is not replaced without --overwrite
        commands.run(ExportOptions(checkpoint=train.output, output=str(root / "hf")))


def test_finetune_and_evaluate_through_run(chain: dict) -> None:
    root, train = chain["root"], chain["train"]
    ft = commands.run(
        FinetuneOptions(
            checkpoint=train.output,
            task="sst2",
            data=GLUE,
            output=str(root / "ft"),
            head="cls",
            steps=2,
            batch_size=4,
            max_length=32,
            device="cpu",
            progress=False,
        )
    )
    results = json.loads(Path(ft.output, "results.json").read_text())
    assert ft.results == results and ft.stopped_at is None
    assert set(ft.metrics["dev"]) >= {"accuracy"}
    assert ft.fingerprint() == sha256(str(Path(ft.output, "predictions.jsonl")))
    assert ft.text().startswith("c4forge finetune: sst2 with head cls")

    ev = commands.run(
        EvaluateOptions(
            ft=ft.output,
            task="sst2",
            data=GLUE,
            output=str(root / "ev"),
            device="cpu",
            progress=False,
        )
    )
    assert ev.output == str(root / "ev")
    assert ev.metrics["dev"]["accuracy"] == ft.metrics["dev"]["accuracy"]  # the same model
    assert ev.text().startswith("c4forge evaluate: sst2 with head cls")


def test_task_shards_through_run(chain: dict) -> None:
    root, vocab = chain["root"], chain["vocab"]
    res = commands.run(
        TaskShardsRequest(
            task="rte",
            vocab=vocab.output,
            output=str(root / "rte"),
            data=GLUE,
            inputs_length=32,
            targets_length=4,
            quiet=True,
        )
    )
    index = json.loads(Path(res.output, "index.json").read_text())
    assert res.fingerprint() == index["dataset_fingerprint"]
    assert res.truncated  # RTE's premises do not fit 32 tokens: said, with the length that fits
    assert res.text().splitlines()[0].startswith("c4forge shards task: rte (text_to_text) 32/4")
    assert "  " + res.truncated[0] in res.text().splitlines()


def test_failures_raise_instead_of_returning_a_code(chain: dict, tmp_path: Path) -> None:
    root = chain["root"]
    with pytest.raises(InputError):
        commands.run(
            CleanJob(inputs=(str(tmp_path / "missing.wet.gz"),), output=str(tmp_path / "c"))
        )
    with pytest.raises(OutputExistsError):  # a finished vocabulary is not overwritten
        commands.run(
            VocabOptions(docs=chain["clean"].output, output=chain["vocab"].output, vocab_size=600)
        )
    with pytest.raises(C4ForgeError):
        commands.run(
            ShardsJob(
                docs=str(tmp_path / "none"), vocab=str(root / "vocab"), output=str(tmp_path / "s")
            )
        )


def test_the_demo_is_a_table_of_command_requests(tmp_path: Path, capsys) -> None:
    """Every demo step is a command's request (run by ``commands.run``) or, for the datasheet,
    a function; a step whose marker exists is said to be complete and not run."""
    import argparse

    from c4forge import demo

    parser = argparse.ArgumentParser()
    demo.register(parser.add_subparsers())
    args = parser.parse_args(["demo", "--output", str(tmp_path), "--workers", "1"])
    work = str(tmp_path)
    folders = [os.path.join(work, d) for d in ("clean", "vocab", "shards", "report", "run")]
    steps = demo._t5_steps(args, ["in.wet.gz"], *folders)
    steps += demo._bert_steps(
        args, folders[0], folders[1], f"{work}/shards_bert", f"{work}/run_bert"
    )
    titles = [s.title for s in steps]
    assert titles == [
        "clean",
        "vocab",
        "shards",
        "report",
        "train",
        "shards (bert_mlm_nsp)",
        "train (bert-tiny)",
    ]
    for step in steps:
        if step.title != "report":
            commands.runner_for(step.request)  # a command's request, or TypeError
    for step in steps:  # every stage already done: nothing runs, each is said complete
        os.makedirs(os.path.dirname(step.marker), exist_ok=True)
        Path(step.marker).touch()
    demo._run_steps(steps, overwrite=False)
    said = [line for line in capsys.readouterr().out.splitlines() if line]
    assert said == [
        f"=== {os.path.basename(os.path.dirname(s.marker))}: already complete ({s.marker})"
        for s in steps
    ]
