"""Extension points are registries: a strategy or a head registered from outside the package
(here, this test module) is picked up by the code that uses it, with no other module edited."""

from __future__ import annotations

import math

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
            {"optimizer": "adamw", "lr": 5e-4, "schedule": "constant", "warmup": 0.0,
             "weight_decay": 0.0, "grad_clip": 1.0, "betas": (0.9, 0.999), "eps": 1e-8},
            builder=f"{__name__}:make_mean_head",
            lr_rule="toy head: fixed 5e-4",
        )
    )  # fmt: skip
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
        checkpoint=t5_run, task="rte", data=GLUE, output=str(tmp_path / "ft"), head="mean",
        steps=3, batch_size=8, max_length=48, device="cpu", progress=False,
    )  # fmt: skip
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

TOY_PRESETS = {"toy-tiny": {"d_model": 8}}


class ToyTraining:
    """A toy family's training glue: only what the registry lookups touch."""

    name = "toy"
    parts = ("loss",)


@pytest.fixture
def toy_family():
    from c4forge.trainers.models import FAMILIES, register_family
    from c4forge.trainers.models.family import Family

    fam = register_family(
        Family(
            "toy",
            module="c4forge.trainers.models.bert",
            presets=f"{__name__}:TOY_PRESETS",
            training=f"{__name__}:ToyTraining",
            exporter_ref="c4forge.trainers.export_bert:BERT_EXPORT",
            hidden_states_ref="c4forge.finetune.heads:bert_hidden_states",
            optimizer="adamwscale",
            objectives=("toy_objective",),
            options=frozenset({"z_loss"}),
        )
    )
    yield fam
    del FAMILIES[fam.name]


def test_registered_family_is_found_by_the_trainer_lookups(toy_family):
    from c4forge.finetune.head_registry import default_head, heads_for
    from c4forge.trainers import models
    from c4forge.trainers.families import training_for
    from c4forge.trainers.options import TrainOptions

    assert models.preset_families()["toy-tiny"] == "toy"
    assert models.family_of_preset("toy-tiny") == "toy"
    assert models.family_of_objective("toy_objective", set(), "x") == "toy"
    # an inputs/targets objective still trains t5, bert_mlm_nsp still bert
    assert models.family_of_objective("span_corruption", {"inputs", "targets"}, "x") == "t5"
    assert models.family_of_objective("bert_mlm_nsp", set(), "x") == "bert"
    assert isinstance(training_for("toy"), ToyTraining)
    assert TrainOptions(shards="s", output="o", steps=1).resolved_training("toy")["optimizer"] == (
        "adamwscale"
    )
    assert models.option_owners("z_loss") == ["t5", "toy"]
    # not encoder-decoder: no text head; a classifier head by default
    assert default_head("toy") == "cls" and "text" not in heads_for("toy")
    assert models.get_family("toy").exporter().architecture == "BertForPreTraining"


def test_unknown_family_is_one_line_error():
    from c4forge.trainers.families import training_for

    with pytest.raises(ConfigError, match="no training glue for model family 'toy'"):
        training_for("toy")
    with pytest.raises(ConfigError, match="unknown model family 'toy'"):
        from c4forge.trainers.models import get_family

        get_family("toy")
