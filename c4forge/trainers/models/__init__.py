"""Model families: one module each, found through this small registry.

A family module (``t5.py``, ``bert.py``) declares everything about its family in one
:class:`~c4forge.trainers.models.family.Family` named ``FAMILY``: presets, config, model,
training glue, exporter, encoder hidden states, default optimizer, the objectives it trains, its
own options and its shape (encoder-decoder, ``[CLS]`` inputs, learned positions). Below, one
``register_family`` line per family names its module. The trainer, the data loader,
checkpoints, export and fine-tuning ask this registry which family a preset, a shard set or a
checkpoint belongs to and read the family's attributes, so the next family is one more module
and one more ``register_family`` line.

A module named here is imported on the first lookup (it needs torch; importing the registry
does not). The family of a checkpoint is read from its ``config.json``: the bert config carries
``"family": "bert"``; a config without the key belongs to the family with ``unmarked_configs``
(t5: the format predates families).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

from c4forge.errors import ConfigError, VerificationError
from c4forge.trainers.models.family import Family, ModelConfig

FAMILIES: dict[str, Family] = {}  # read it through families() / get_family: modules load lazily
_PENDING: list[str] = []  # modules registered by name, not imported yet


def register_family(family: Family | str) -> Family | str:
    """Add a model family: a :class:`Family`, or the name of a module whose ``FAMILY`` it is
    (imported on the first lookup). Registry order is the order presets are listed in."""
    if isinstance(family, str):
        _PENDING.append(family)
        return family
    _load_pending()
    if family.name in FAMILIES:
        raise ValueError(f"model family {family.name!r} is already registered")
    FAMILIES[family.name] = family
    return family


def _load_pending() -> None:
    while _PENDING:
        fam = importlib.import_module(_PENDING[0]).FAMILY
        del _PENDING[0]  # after the import: a module that fails to import fails every lookup
        if fam.name in FAMILIES:
            raise ValueError(f"model family {fam.name!r} is already registered")
        FAMILIES[fam.name] = fam


register_family("c4forge.trainers.models.t5")
register_family("c4forge.trainers.models.bert")


def families() -> dict[str, Family]:
    """Every registered family by name, in registry order (t5's first)."""
    _load_pending()
    return FAMILIES


def get_family(name: str) -> Family:
    known = families()
    if name not in known:
        raise ConfigError(f"unknown model family {name!r}; valid: {', '.join(known)}")
    return known[name]


def default_family() -> Family:
    """The family of a ``config.json`` without a ``family`` key (``Family.unmarked_configs``)."""
    return next(f for f in families().values() if f.unmarked_configs)


def preset_families() -> dict[str, str]:
    """Every preset name → its family, in registry order (t5's first)."""
    return {p: name for name, fam in families().items() for p in fam.preset_names()}


def option_owners(option: str) -> list[str]:
    """The families that take a family-specific trainer option."""
    return [name for name, fam in families().items() if option in fam.options]


def family_of_preset(preset: str) -> str:
    known = preset_families()
    if preset not in known:
        raise ConfigError(f"unknown preset {preset!r}; valid: {', '.join(known)}")
    return known[preset]


def family_of_objective(objective: str, columns: set[str], where: str) -> str:
    """The family a shard set trains: one that names the objective (bert: ``bert_mlm_nsp``),
    else the first that trains any inputs/targets rows (t5)."""
    known = families().values()
    named = [f for f in known if f.objectives is not None]
    for fam in [*named, *(f for f in known if f.objectives is None)]:
        if fam.trains(objective, columns):
            return fam.name
    raise ConfigError(
        f"{where}: no model family trains {objective!r} rows (columns {sorted(columns)})"
    )


def make_config(preset: str, embedding_size: int, **overrides: Any) -> tuple[str, ModelConfig]:
    """``(family, config)`` of a preset with overrides (None = not given)."""
    family = family_of_preset(preset)
    return family, get_family(family).make_config(preset, embedding_size, **overrides)


def config_family(data: dict[str, Any]) -> str:
    return str(data["family"]) if "family" in data else default_family().name


def read_config(data: dict[str, Any]) -> tuple[str, ModelConfig]:
    """``(family, config)`` from a checkpoint's ``config.json`` (the family read from it)."""
    family = config_family(data)
    return family, get_family(family).config.from_dict(data)


def config_from_dict(family: str, data: dict[str, Any]) -> ModelConfig:
    """The ``family``'s config from its ``to_dict`` form; a config of another family is refused."""
    found = config_family(data) if "family" in data else family
    if found != family:
        raise ConfigError(f"a {found} model config is not a {family} config")
    return get_family(family).config.from_dict(data)


def family_of(config: ModelConfig) -> str:
    """The family of a model config (every family's config names it)."""
    return str(config.family)


def build_model(family: str, config: ModelConfig) -> Any:
    """A randomly initialised model of the family and shape (torch's global RNG draws the init)."""
    if family_of(config) != family:
        raise ConfigError(f"a {family_of(config)} config cannot build a {family} model")
    return get_family(family).model(config)


# ---------------------------------------------------------------------------------------------
# Loading a pretrained checkpoint (fine-tuning, evaluation, export)


@dataclass
class Pretrained:
    model: Any  # nn.Module in eval mode
    family: str  # a registered family's name
    config: ModelConfig  # the family's config dataclass
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
