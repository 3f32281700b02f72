"""Extension points are registries: a strategy or a head registered from outside the package
(here, this test module) is picked up by the code that uses it, with no other module edited."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest

from c4forge.errors import ConfigError
from c4forge.trainers import mixture_spec
from c4forge.trainers.mixture_spec import (
    STRATEGIES,
    Strategy,
    mixing_rates,
    register_strategy,
    spec_from_mapping,
)
from c4forge.trainers.models.family import Family


@pytest.fixture
def sqrt_strategy():
    """A toy strategy: a source weighs the square root of its rows, capped at K."""
    st = register_strategy(
        Strategy(
            "sqrt",
            lambda spec, s, n: math.sqrt(min(n, spec.limit) if spec.limit else n),
            frozenset({"limit"}),
            counts_rows=True,
        )
    )
    yield st
    del STRATEGIES[st.name]


def _mapping(**top):
    return {**top, "sources": {"a": {"shards": "x"}, "b": {"shards": "y"}}}


def test_registered_strategy_is_validated_and_rated(sqrt_strategy):
    spec = spec_from_mapping(_mapping(strategy="sqrt", limit=100), origin="mix.toml")
    assert mixing_rates(spec, [400, 25]) == pytest.approx([10 / 15, 5 / 15])
    with pytest.raises(ConfigError, match="temperature is only used by strategy 'temperature'"):
        spec_from_mapping(_mapping(strategy="sqrt", temperature=2.0), origin="mix.toml")
    with pytest.raises(ConfigError, match="has no train rows"):
        mixing_rates(spec, [400, 0])
    # the key's users now include the new strategy
    assert "'sqrt'" in mixture_spec._users("limit")


def test_unregistered_strategy_is_one_line_error():
    with pytest.raises(ConfigError, match="unknown strategy 'sqrt'"):
        spec_from_mapping(_mapping(strategy="sqrt"), origin="mix.toml")


def test_strategy_names_are_unique():
    with pytest.raises(ValueError, match="already registered"):
        register_strategy(Strategy("equal", lambda spec, s, n: 1.0))


# ----------------------------------------------------------------------------- heads


def make_mean_head(family: str, d: int, num_labels: int):
    """A toy classifier head: a linear layer on the mean of the final states (no pooler)."""
    import torch
    from torch import nn

    class MeanHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out = nn.Linear(d, num_labels)

        def forward(self, backbone, states, final, mask):
            m = mask[..., None].to(final.dtype)
            return {"logits": self.out((final * m).sum(1) / m.sum(1).clamp_min(1.0))}

    torch.manual_seed(0)
    return MeanHead()


@pytest.fixture
def mean_head():
    from c4forge.finetune.head_registry import HEADS, Head, register_head

    head = register_head(
        Head(
            "mean",
            {
                "optimizer": "adamw",
                "lr": 5e-4,
                "schedule": "constant",
                "warmup": 0.0,
                "weight_decay": 0.0,
                "grad_clip": 1.0,
                "betas": (0.9, 0.999),
                "eps": 1e-8,
            },
            builder=f"{__name__}:make_mean_head",
            lr_rule="toy head: fixed 5e-4",
        )
    )
    yield head
    del HEADS[head.name]


@pytest.fixture(scope="module")
def t5_run(tmp_path_factory):
    from finetune_fixtures import tiny_t5_run

    return tiny_t5_run(tmp_path_factory.mktemp("registries_t5"))


def test_registered_head_is_fine_tuned_end_to_end(mean_head, t5_run, tmp_path):
    """The fine-tuning loop builds, trains and evaluates a head it has never heard of."""
    from finetune_fixtures import GLUE, predictions_by_split

    from c4forge.finetune.heads import EncoderClassifier
    from c4forge.finetune.loop import finetune, setup
    from c4forge.finetune.options import FinetuneOptions

    opts = FinetuneOptions(
        checkpoint=t5_run,
        task="rte",
        data=GLUE,
        output=str(tmp_path / "ft"),
        head="mean",
        steps=3,
        batch_size=8,
        max_length=48,
        device="cpu",
        progress=False,
    )
    s = setup(opts)
    assert isinstance(s.model, EncoderClassifier)
    assert type(s.model.head).__name__ == "MeanHead"
    assert not hasattr(s.model.backbone, "decoder")  # a classifier head drops T5's decoder
    assert s.recipe["lr"] == 5e-4 and s.recipe["lr_rule"] == "toy head: fixed 5e-4"
    assert s.train_enc.targets is None  # not a generating head: no target strings
    res = finetune(opts)
    assert res["head"] == "mean"
    (labels, preds), *_ = predictions_by_split(str(tmp_path / "ft")).values()
    assert len(preds) == len(labels) > 0 and set(preds) <= {0, 1}


def test_head_registry_defaults_and_errors(mean_head):
    from c4forge.finetune.head_registry import Head, default_head, heads_for, register_head

    assert default_head("t5") == "text" and default_head("bert") == "cls"
    assert heads_for("bert") == ["cls", "hire", "mean"]  # a new head runs on any family
    with pytest.raises(ValueError, match="already registered"):
        register_head(Head("cls", {}, builder="x:y"))
    with pytest.raises(ValueError, match="a builder for a classifier head"):
        register_head(Head("nobuilder", {}))


# ----------------------------------------------------------------------------- model families
# A toy family, declared here as a family module would declare it: a config, a model, its
# training glue, its hidden states and one Family. It trains span-corruption rows (it names the
# objective, so it takes them from t5 while registered): the mean of the input embeddings added
# to each decoder input's embedding, one linear layer to the vocabulary.


@dataclass
class ToyConfig:
    embedding_size: int
    d_model: int = 8
    ffn: str = "none"
    dropout_rate: float = 0.0
    family: str = "toy"

    n_layers = 1
    max_position = None

    @property
    def vocab_size(self) -> int:
        return self.embedding_size

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ToyConfig:
        return cls(**data)


TOY_PRESETS = {"toy-tiny": {"d_model": 8}}


def toy_make_config(preset: str, embedding_size: int, **overrides) -> ToyConfig:
    return ToyConfig(embedding_size, **TOY_PRESETS[preset])


def toy_model(cfg: ToyConfig):
    from torch import nn

    class ToyModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(cfg.embedding_size, cfg.d_model)
            self.out = nn.Linear(cfg.d_model, cfg.embedding_size)

        def forward(self, inputs, decoder_inputs):
            context = self.embed(inputs.long()).mean(1, keepdim=True)
            return self.out(self.embed(decoder_inputs.long()) + context).float()

    return ToyModel()


class ToyTraining:
    """The toy's training glue: the t5 batches, one loss part (Σ w·CE / Σ w)."""

    name = "toy"
    parts = ("loss",)
    stats: tuple = ()
    columns = ("inputs", "targets")
    checks_rows = False

    def row_tokens(self, inputs_length, targets_length):
        return inputs_length + targets_length

    def stats_record(self, sums, weights):
        return {}

    def to_device(self, item, device, non_blocking=False):
        from c4forge.trainers.data import to_device

        return to_device(item, device, non_blocking)

    def counts(self, batch):
        return batch.weights().sum()[None]

    def nonpad(self, batch):
        return (batch.input_ids != 0).sum() + (batch.targets != 0).sum()

    def forward_sums(self, model, batch, z_loss, autocast):
        from c4forge.trainers.loss import weighted_cross_entropy

        with autocast:
            logits = model(batch.input_ids, batch.decoder_input_ids)
        loss_sum, _ = weighted_cross_entropy(logits, batch.targets, z_loss)
        return loss_sum[None], loss_sum.new_zeros(0)

    def check_rows(self, data, where, cfg):
        return None

    def eval_record(self, sums, counts, stats):
        return {"eval_nll": sums[0] / counts[0]} if counts[0] > 0 else {}

    def eval_text(self, record):
        return f"held-out NLL {record['eval_nll']:.4f}"

    def flops_per_example(self, cfg, inputs_length, targets_length):
        return 6.0 * cfg.d_model * cfg.embedding_size * targets_length


def toy_hidden_states(model, batch):
    states = [model.embed(batch["input_ids"].long())]
    return states, states[-1]


TOY = Family(
    name="toy",
    presets=TOY_PRESETS,
    config=ToyConfig,
    make_config=toy_make_config,
    model=toy_model,
    training=ToyTraining(),
    exporter_ref="c4forge.trainers.export_bert:BERT_EXPORT",
    hidden_states=toy_hidden_states,
    optimizer="adamw",
    objectives=("span_corruption",),
    options=frozenset({"z_loss"}),
)


@pytest.fixture
def toy_family():
    from c4forge.trainers.models import FAMILIES, register_family

    yield register_family(TOY)  # the one registration line
    del FAMILIES[TOY.name]


def test_registered_family_is_found_by_the_trainer_lookups(toy_family):
    from c4forge.finetune.head_registry import default_head, heads_for
    from c4forge.trainers import models
    from c4forge.trainers.families import training_for
    from c4forge.trainers.options import TrainOptions

    assert models.preset_families()["toy-tiny"] == "toy"
    assert models.family_of_preset("toy-tiny") == "toy"
    assert models.family_of_objective("span_corruption", {"inputs", "targets"}, "x") == "toy"
    # another inputs/targets objective still trains t5, bert_mlm_nsp still bert
    assert models.family_of_objective("prefix_lm", {"inputs", "targets"}, "x") == "t5"
    assert models.family_of_objective("bert_mlm_nsp", set(), "x") == "bert"
    assert isinstance(training_for("toy"), ToyTraining)
    assert TrainOptions(shards="s", output="o", steps=1).resolved_training("toy")["optimizer"] == (
        "adamw"
    )
    assert models.option_owners("z_loss") == ["t5", "toy"]
    # not encoder-decoder: no text head; a classifier head by default
    assert default_head("toy") == "cls" and "text" not in heads_for("toy")
    assert models.get_family("toy").exporter().architecture == "BertForPreTraining"
    assert models.default_family().name == "t5"  # config.json without "family" stays t5's


@pytest.fixture(scope="module")
def span_data(tmp_path_factory):
    """A vocabulary and span-corruption shards of the bundled C4 sample (train_fixtures)."""
    from train_fixtures import build_data

    root = tmp_path_factory.mktemp("registries_data")
    build_data(root, docs=40)
    return root


def test_registered_family_trains_through_the_train_loop(toy_family, span_data, tmp_path):
    """The real loop (setup, steps, eval, checkpoint) trains a family it has never heard of."""
    import json
    import os

    from train_fixtures import tiny_options

    from c4forge.trainers import checkpoint as ckpt
    from c4forge.trainers.metrics import read_metrics
    from c4forge.trainers.models import load_pretrained
    from c4forge.trainers.train import train

    out = tmp_path / "run"
    opts = tiny_options(span_data, out, preset="toy-tiny", steps=4, lr=0.05, eval_every=4)
    summary = train(opts)
    assert summary.steps == 4 and math.isfinite(summary.final_loss)
    losses = [r["loss"] for r in read_metrics(str(out / "metrics.jsonl")) if "loss" in r]
    assert len(losses) == 4 and losses[-1] < losses[0]  # adamw, its default, learns
    step_dir = ckpt.latest_checkpoint(str(out))
    with open(os.path.join(step_dir, "config.json")) as f:
        assert json.load(f) == {
            "embedding_size": 1152,
            "d_model": 8,
            "ffn": "none",
            "dropout_rate": 0.0,
            "family": "toy",
        }
    with open(os.path.join(step_dir, "trainer_state.json")) as f:
        state = json.load(f)
    assert (
        state["config"]["family"] == "toy" and state["config"]["training"]["optimizer"] == "adamw"
    )
    back = load_pretrained(str(out))  # the checkpoint reads back as the toy family's model
    assert back.family == "toy" and type(back.model).__name__ == "ToyModel"


def test_registered_family_is_fine_tuned_through_its_hidden_states(
    toy_family, mean_head, span_data, tmp_path
):
    """Fine-tuning reads a new family's checkpoint, encoder states and shape from its Family."""
    from finetune_fixtures import GLUE, predictions_by_split
    from train_fixtures import tiny_options

    from c4forge.finetune.loop import finetune, setup
    from c4forge.finetune.options import FinetuneOptions
    from c4forge.trainers.train import train

    train(tiny_options(span_data, tmp_path / "run", preset="toy-tiny", steps=1))
    opts = FinetuneOptions(
        checkpoint=str(tmp_path / "run"),
        task="rte",
        data=GLUE,
        output=str(tmp_path / "ft"),
        head="mean",
        steps=2,
        batch_size=8,
        max_length=48,
        device="cpu",
        progress=False,
    )
    s = setup(opts)
    assert type(s.model.backbone).__name__ == "ToyModel" and s.model.family == "toy"
    res = finetune(opts)
    assert res["head"] == "mean"
    (labels, preds), *_ = predictions_by_split(str(tmp_path / "ft")).values()
    assert len(preds) == len(labels) > 0 and set(preds) <= {0, 1}


def test_a_family_without_mixture_glue_trains_no_mixture(toy_family, span_data, tmp_path):
    from train_fixtures import tiny_options

    from c4forge.trainers.train import train

    opts = tiny_options(
        span_data,
        tmp_path / "run",
        preset="toy-tiny",
        shards=f"a={span_data / 'shards'}",
        steps=1,
        mix=(f"b={span_data / 'shards'}",),
        mix_rates="0.5,0.5",
    )
    with pytest.raises(ConfigError, match=r"mixtures train the t5 family \(encoder-decoder rows\)"):
        train(opts)


def test_unregistered_family_is_refused_by_preset_and_checkpoint(span_data, tmp_path):
    from train_fixtures import tiny_options

    from c4forge.trainers.train import train

    with pytest.raises(ConfigError, match="unknown preset 'toy-tiny'"):
        train(tiny_options(span_data, tmp_path / "run", preset="toy-tiny", steps=1))


def test_registered_strategy_weighs_a_training_mixture(sqrt_strategy, span_data, tmp_path):
    """A mixture under a strategy registered here trains through the real loop."""
    from train_fixtures import tiny_options

    from c4forge.trainers import checkpoint as ckpt
    from c4forge.trainers.train import train

    opts = tiny_options(
        span_data,
        tmp_path / "run",
        shards=f"a={span_data / 'shards'}",
        steps=2,
        mix=(f"b={span_data / 'shards'}",),
        mix_strategy="sqrt",
    )
    summary = train(opts)
    assert summary.steps == 2 and math.isfinite(summary.final_loss)
    assert "mixture (sqrt)" in summary.text()
    import json
    import os

    with open(
        os.path.join(ckpt.latest_checkpoint(str(tmp_path / "run")), "trainer_state.json")
    ) as f:
        mix = json.load(f)["config"]["mixture"]
    assert mix["strategy"] == "sqrt" and mix["rates"] == pytest.approx([0.5, 0.5])


def test_the_registry_imports_a_family_module_on_the_first_lookup():
    """Importing the registry loads no family module (they need torch): --help stays fast."""
    import subprocess
    import sys

    code = (
        "import sys; from c4forge.trainers import models; "
        "print('torch' in sys.modules); models.get_family('bert'); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_unknown_family_is_one_line_error():
    from c4forge.trainers.families import training_for

    with pytest.raises(ConfigError, match="no training glue for model family 'toy'"):
        training_for("toy")
    with pytest.raises(ConfigError, match="unknown model family 'toy'"):
        from c4forge.trainers.models import get_family

        get_family("toy")
