"""Model families: one module each, found through this small registry.

A family module (``t5.py``, ``bert.py``) defines ``FAMILY`` (its name), ``PRESETS``, a config
dataclass with ``to_dict``/``from_dict``, ``make_config(preset, embedding_size, **overrides)`` and
``Model`` (the ``nn.Module``). The trainer, the data loader, checkpoints and export ask this
registry which family a preset, a shard set or a checkpoint belongs to, so the next family is one
more module and one more line in ``FAMILIES``.

The family of a checkpoint is read from its ``config.json``: the bert config carries
``"family": "bert"``; a config without the key is the t5 family (the format predates families).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from c4forge.errors import ConfigError, VerificationError

FAMILIES: dict[str, str] = {
    "t5": "c4forge.trainers.models.t5",
    "bert": "c4forge.trainers.models.bert",
}
# the objectives the bert family trains on; every inputs/targets objective trains t5 (the shard
# set's objective decides the family, finetune.md §1)
BERT_OBJECTIVES = ("bert_mlm_nsp",)


def family_module(name: str) -> ModuleType:
    if name not in FAMILIES:
        raise ConfigError(f"unknown model family {name!r}; valid: {', '.join(FAMILIES)}")
    return importlib.import_module(FAMILIES[name])


def preset_families() -> dict[str, str]:
    """Every preset name → its family, in registry order (t5's first)."""
    from c4forge.trainers.config import PRESETS as T5_PRESETS
    from c4forge.trainers.models.bert import PRESETS as BERT_PRESETS

    return {**{p: "t5" for p in T5_PRESETS}, **{p: "bert" for p in BERT_PRESETS}}


def family_of_preset(preset: str) -> str:
    known = preset_families()
    if preset not in known:
        raise ConfigError(f"unknown preset {preset!r}; valid: {', '.join(known)}")
    return known[preset]


def family_of_objective(objective: str, columns: set[str], where: str) -> str:
    """The family a shard set trains: bert for ``bert_mlm_nsp``, t5 for inputs/targets rows."""
    if objective in BERT_OBJECTIVES:
        return "bert"
    if {"inputs", "targets"} <= columns:
        return "t5"
    raise ConfigError(
        f"{where}: no model family trains {objective!r} rows (columns {sorted(columns)})"
    )


def make_config(preset: str, embedding_size: int, **overrides: Any) -> tuple[str, Any]:
    """``(family, config)`` of a preset with overrides (None = not given)."""
    family = family_of_preset(preset)
    return family, family_module(family).make_config(preset, embedding_size, **overrides)


def config_family(data: dict[str, Any]) -> str:
    return str(data.get("family", "t5"))


def read_config(data: dict[str, Any]) -> tuple[str, Any]:
    """``(family, config)`` from a checkpoint's ``config.json`` (the family read from it)."""
    family = config_family(data)
    return family, family_module(family).Config.from_dict(data)


def config_from_dict(family: str, data: dict[str, Any]) -> Any:
    """The ``family``'s config from its ``to_dict`` form; a config of another family is refused."""
    found = config_family(data) if "family" in data else family
    if found != family:
        raise ConfigError(f"a {found} model config is not a {family} config")
    return family_module(family).Config.from_dict(data)


def family_of(config: Any) -> str:
    """The family of a model config (every family's config names it)."""
    return str(config.family)


def build_model(family: str, config: Any):
    """A randomly initialised model of the family and shape (torch's global RNG draws the init)."""
    if family_of(config) != family:
        raise ConfigError(f"a {family_of(config)} config cannot build a {family} model")
    return family_module(family).Model(config)


# ---------------------------------------------------------------------------------------------
# Loading a pretrained checkpoint (fine-tuning, evaluation, export)


@dataclass
class Pretrained:
    model: Any  # nn.Module in eval mode
    family: str  # "t5" | "bert"
    config: Any  # the family's config dataclass
    vocab_dir: str | None  # RUN/vocab, or the vocabulary the run recorded, when present
    fingerprint: str  # sha256 of the checkpoint's model.safetensors
    step: int
    checkpoint: str  # the step directory loaded


def run_dir_of(step_dir: str) -> str:
    """``RUN`` for ``RUN/checkpoints/step-N``."""
    return os.path.dirname(os.path.dirname(os.path.abspath(step_dir)))


def find_vocab_dir(step_dir: str, state: dict[str, Any]) -> str | None:
    """The run's own copy (``RUN/vocab``) first, so a moved run folder still finds it; then the
    vocabulary directory recorded at training time."""
    from c4forge.vocab.vocab_files import copy_dir

    own = copy_dir(run_dir_of(step_dir))
    if own:
        return own
    cfg = state.get("config") if isinstance(state.get("config"), dict) else {}
    recorded = cfg.get("vocab_dir") if cfg else None
    if isinstance(recorded, str) and os.path.isfile(os.path.join(recorded, "vocab.json")):
        return recorded
    return None


def load_pretrained(path: str, device: Any = "cpu") -> Pretrained:
    """The model of a run folder (its latest checkpoint) or of a ``checkpoints/step-N`` folder."""
    from c4forge.io.storage import read_json
    from c4forge.trainers.checkpoint import read_model_tensors, resolve_checkpoint

    step_dir = resolve_checkpoint(path)
    cfg_path = os.path.join(step_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise VerificationError(f"{step_dir}: config.json is missing (incomplete checkpoint)")
    try:
        family, config = read_config(read_json(cfg_path))
    except (ConfigError, TypeError, ValueError) as err:
        raise VerificationError(f"{cfg_path}: {err}") from err
    state_path = os.path.join(step_dir, "trainer_state.json")
    state = read_json(state_path) if os.path.isfile(state_path) else {}
    import torch

    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in build_model(family, config).state_dict().items()}
    tensors, fingerprint = read_model_tensors(step_dir, shapes)  # the sha256 of what was read
    model = build_model(family, config)
    model.load_state_dict(tensors, strict=True)
    return Pretrained(
        model=model.to(device).eval(),
        family=family,
        config=config,
        vocab_dir=find_vocab_dir(step_dir, state),
        fingerprint=fingerprint,
        step=int(state.get("step", 0)),
        checkpoint=step_dir,
    )
