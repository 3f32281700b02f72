"""The experiment file (TOML): a base recipe, named arms that override it, and its checks.

```toml
[experiment]
name = "glu_table1"
base_name = "relu"          # the base recipe is itself an arm, under this name
seeds = [0, 1]
shared_vocab = true         # every arm uses the base corpus's vocabulary

[base.corpus]   inputs, variant, dedup, url_list, domain_list, badwords_fraction
[base.vocab]    size, sample_chars, seed
[base.shards]   objective, inputs_length, targets_length, noise_density, …
[base.model]    preset, ffn, d_ff, dropout, tie_embeddings
[base.train]    steps, batch_size, optimizer, schedule, lr, warmup, …
[base.finetune] tasks, data, head, steps, lr, batch_size, max_length, …
                (steps = 0 with head "text": the checkpoint's own text head, no fine-tuning)
[base.mix]      sources (variants or "task:NAME"), strategy, rates, limit, temperature

[arms.gelu]
model.ffn = "gelu"
```

Everything is checked here, before any stage runs, and every problem is one ``ConfigError``
line naming the file, the table and the key: an unknown key or section, a wrong type, an arm
that overrides nothing, a task whose data folder lacks its files, an arm that changes the
vocabulary of a ``shared_vocab`` experiment, and every value the stages themselves would refuse
(FFN, preset, objective, variant, head, task names), so a typo never costs a clean run.
"""

from __future__ import annotations

import copy
import os
import tomllib
from dataclasses import dataclass, field
from typing import Any

from c4forge.data import BUNDLED_GLUE
from c4forge.errors import ConfigError, InputError

SAMPLE = "sample"  # corpus.inputs: the bundled real sample (what `c4forge demo` cleans)

# section -> key -> accepted Python types (bool is checked apart from int).
RECIPE: dict[str, dict[str, tuple[type, ...]]] = {
    "corpus": {
        "inputs": (str, list),
        "variant": (str,),
        "dedup": (str,),
        "url_list": (str,),
        "domain_list": (str,),
        "badwords_fraction": (float, int),
    },
    "vocab": {"size": (int,), "sample_chars": (int,), "seed": (int,)},
    "shards": {
        "objective": (str,),
        "inputs_length": (int,),
        "targets_length": (int,),
        "noise_density": (float,),
        "mean_noise_span_length": (float, int),
        "packing": (str,),
        "seed": (int,),
    },
    "model": {
        "preset": (str,),
        "ffn": (str,),
        "d_ff": (int,),
        "dropout": (float, int),
        "tie_embeddings": (bool,),
    },
    "train": {
        "steps": (int,),
        "batch_size": (int,),
        "optimizer": (str,),
        "schedule": (str,),
        "lr": (float,),
        "warmup": (int,),
        "grad_clip": (float, int),
        "eval_every": (int,),
        "eval_rows": (int,),
        "save_every": (int,),
        "log_every": (int,),
    },
    "finetune": {
        "tasks": (list,),
        "data": (str,),
        "head": (str,),
        "steps": (int,),
        "lr": (float,),
        "batch_size": (int,),
        "max_length": (int,),
        "max_train_examples": (int,),
        "random_baseline": (bool,),
        "save_every": (int,),
    },
    # pretrain on a mixture: the arm's own corpus first, then each source (a corpus variant
    # cleaned from the same inputs, or "task:NAME", a GLUE task from finetune.data)
    "mix": {
        "sources": (list,),
        "strategy": (str,),
        "rates": (list,),
        "limit": (int,),
        "temperature": (float, int),
        "task_targets_length": (int,),
    },
}
EXPERIMENT: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "description": (str,),
    "base_name": (str,),
    "seeds": (list,),
    "shared_vocab": (bool,),
    "bootstrap": (int,),
    "workers": (int,),
    "budget": (str,),
}
TOP = ("experiment", "base", "arms")

# What a recipe holds when the file says nothing (the demo's CPU scale).
DEFAULTS: dict[str, dict[str, Any]] = {
    "corpus": {"inputs": SAMPLE, "variant": "en"},
    "vocab": {"size": 2000},
    "shards": {"objective": "span_corruption", "inputs_length": 128},
    "model": {"preset": "tiny"},
    "train": {
        "steps": 300,
        "batch_size": 32,
        "optimizer": "adamwscale",
        "lr": 3e-3,
        "eval_rows": 512,
    },
    "finetune": {
        "tasks": ["sst2"],
        "data": BUNDLED_GLUE,
        "head": "cls",
        "steps": 120,
        "lr": 1e-3,
        "batch_size": 32,
        "max_length": 64,
        "random_baseline": True,
    },
}


@dataclass
class Experiment:
    """A checked experiment: resolved recipes per arm (base first), seeds and options."""

    path: str
    name: str
    base_name: str
    seeds: list[int]
    arms: dict[str, dict[str, dict[str, Any]]]  # arm -> section -> key -> value (resolved)
    overrides: dict[str, dict[str, dict[str, Any]]]  # arm -> what it changed (base: {})
    shared_vocab: bool = False
    bootstrap: int = 1000
    workers: int | None = None
    description: str = ""
    budget: str = ""
    raw: dict[str, Any] = field(default_factory=dict)


def _type_name(types: tuple[type, ...]) -> str:
    return " or ".join(
        {str: "string", int: "integer", float: "number", bool: "true/false", list: "list"}[t]
        for t in types
    )


def _check_type(where: str, value: Any, types: tuple[type, ...]) -> None:
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if not ok:
        raise ConfigError(f"{where}: expected {_type_name(types)}, got {value!r}")


def _check_table(where: str, table: Any, known: dict[str, Any]) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}"
        )


def _check_recipe(where: str, recipe: Any) -> None:
    _check_table(where, recipe, RECIPE)
    for section, values in recipe.items():
        _check_table(f"{where}.{section}", values, RECIPE[section])
        for key, value in values.items():
            _check_type(f"{where}.{section}.{key}", value, RECIPE[section][key])


def merge(base: dict[str, dict[str, Any]], over: dict[str, dict[str, Any]]) -> dict:
    out = copy.deepcopy(base)
    for section, values in over.items():
        out.setdefault(section, {}).update(copy.deepcopy(values))
    return out


def _resolve_path(value: str, folder: str) -> str:
    value = os.path.expanduser(value)
    return value if os.path.isabs(value) else os.path.normpath(os.path.join(folder, value))


def load(path: str) -> Experiment:
    """Read and check ``path``; raises ``ConfigError`` (one line) on the first problem."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such experiment file")
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    return from_mapping(raw, path)


def from_mapping(raw: dict[str, Any], path: str = "<config>") -> Experiment:
    """The checks of :func:`load` on an already parsed mapping (tests build these)."""
    name = os.path.basename(path)
    _check_table(name, raw, dict.fromkeys(TOP))
    exp = raw.get("experiment", {})
    _check_table(f"{name} [experiment]", exp, EXPERIMENT)
    for key, value in exp.items():
        _check_type(f"{name} [experiment] {key}", value, EXPERIMENT[key])
    base_raw = raw.get("base", {})
    _check_recipe(f"{name} [base]", base_raw)
    arms_raw = raw.get("arms", {})
    if not isinstance(arms_raw, dict):
        raise ConfigError(f"{name} [arms]: expected tables [arms.NAME]")
    base_name = exp.get("base_name", "base")
    seeds = exp.get("seeds", [0])
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds):
        raise ConfigError(f"{name} [experiment] seeds: a non-empty list of integers >= 0")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{name} [experiment] seeds: {seeds} repeats a seed")
    folder = os.path.dirname(os.path.abspath(path))
    base = merge(DEFAULTS, base_raw)
    _absolute_paths(base, folder)
    arms: dict[str, dict] = {base_name: base}
    overrides: dict[str, dict] = {base_name: {}}
    for arm, over in arms_raw.items():
        where = f"{name} [arms.{arm}]"
        if arm == base_name:
            raise ConfigError(f"{where}: the name of the base recipe ([experiment] base_name)")
        if not arm.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise ConfigError(f"{where}: arm names are letters, digits, '_', '-', '.'")
        _check_recipe(where, over)
        over = copy.deepcopy(over)
        _absolute_paths(over, folder)
        changed = {
            s: {k: v for k, v in vals.items() if base.get(s, {}).get(k) != v}
            for s, vals in over.items()
        }
        changed = {s: v for s, v in changed.items() if v}
        if not changed:
            raise ConfigError(f"{where}: overrides nothing (every value equals the base recipe)")
        arms[arm] = merge(base, over)
        overrides[arm] = changed
    shared = bool(exp.get("shared_vocab", False))
    if shared:
        for arm, changed in overrides.items():
            if "vocab" in changed:
                keys = ", ".join(f"vocab.{k}" for k in changed["vocab"])
                raise ConfigError(
                    f"{name} [arms.{arm}]: changes {keys}, but [experiment] shared_vocab = true "
                    "needs one vocabulary for every arm"
                )
    for arm, recipe in arms.items():
        check_values(f"{name} [arms.{arm}]" if arm != base_name else f"{name} [base]", recipe)
    bootstrap = exp.get("bootstrap", 1000)
    if bootstrap < 100:
        raise ConfigError(f"{name} [experiment] bootstrap: at least 100 resamples, got {bootstrap}")
    return Experiment(
        path=os.path.abspath(path),
        name=exp.get("name", os.path.splitext(name)[0]),
        base_name=base_name,
        seeds=list(seeds),
        arms=arms,
        overrides=overrides,
        shared_vocab=shared,
        bootstrap=bootstrap,
        workers=exp.get("workers"),
        description=exp.get("description", ""),
        budget=exp.get("budget", ""),
        raw=raw,
    )


def _absolute_paths(recipe: dict[str, dict[str, Any]], folder: str) -> None:
    """Paths in the file are relative to the file, so a shipped config finds its own data."""
    corpus = recipe.get("corpus", {})
    for key in ("url_list", "domain_list"):
        if key in corpus:
            corpus[key] = _resolve_path(corpus[key], folder)
    inputs = corpus.get("inputs")
    if isinstance(inputs, list):
        corpus["inputs"] = [_resolve_path(str(p), folder) for p in inputs]
    elif isinstance(inputs, str) and inputs != SAMPLE:
        corpus["inputs"] = [_resolve_path(inputs, folder)]
    ft = recipe.get("finetune", {})
    if "data" in ft:
        ft["data"] = BUNDLED_GLUE if ft["data"] == "bundled" else _resolve_path(ft["data"], folder)


def check_values(where: str, r: dict[str, dict[str, Any]]) -> None:
    """Values the stages would refuse, refused now (the stages' own validators, no work)."""
    from c4forge.clean.variants import get_variant
    from c4forge.finetune.head_registry import HEADS
    from c4forge.glue.tasks import get_task, split_file
    from c4forge.objectives.registry import OBJECTIVES
    from c4forge.trainers.config import make_config

    c = r["corpus"]
    try:
        variant = get_variant(c["variant"])
    except ConfigError as err:
        raise ConfigError(f"{where} corpus.variant: {err}") from None
    if variant.webtext and not c.get("url_list"):
        raise ConfigError(f"{where}: corpus.variant webtextlike needs corpus.url_list")
    for key in ("url_list", "domain_list"):
        if c.get(key) and not os.path.isfile(c[key]):
            raise ConfigError(f"{where} corpus.{key}: {c[key]}: no such file")
    if isinstance(c["inputs"], list):
        if not c["inputs"]:
            raise ConfigError(f"{where} corpus.inputs: an empty list")
        for p in c["inputs"]:
            if not os.path.exists(p):
                raise ConfigError(f"{where} corpus.inputs: {p}: no such file")
    elif c["inputs"] != SAMPLE:
        raise ConfigError(f"{where} corpus.inputs: {SAMPLE!r} or a list of WET files")
    objective = r["shards"]["objective"]
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"{where} shards.objective: unknown {objective!r}; valid: {', '.join(OBJECTIVES)}"
        )
    m = r["model"]
    try:
        make_config(m["preset"], 128, ffn=m.get("ffn"), d_ff=m.get("d_ff"))
    except ConfigError as err:
        raise ConfigError(f"{where} model: {err}") from None
    if objective == "bert_mlm_nsp":
        raise ConfigError(
            f"{where} shards.objective: bert_mlm_nsp (BERT family) is not an "
            "experiment objective yet; use bert_t5 for T5's BERT-style objective"
        )
    ft = r["finetune"]
    if ft["head"] not in HEADS:
        raise ConfigError(
            f"{where} finetune.head: unknown {ft['head']!r}; valid: {', '.join(HEADS)}"
        )
    if not ft["tasks"]:
        raise ConfigError(f"{where} finetune.tasks: no task")
    for task in ft["tasks"]:
        try:
            spec = get_task(str(task))
        except ConfigError as err:
            raise ConfigError(f"{where} finetune.tasks: {err}") from None
        for split in ("train", *spec.dev_splits):
            try:
                split_file(spec, ft["data"], split)
            except Exception:
                raise ConfigError(
                    f"{where} finetune.tasks: task {task} has no data: "
                    f"{os.path.join(ft['data'], spec.folder, split + '.tsv')} is missing"
                ) from None
    t = r["train"]
    for key in ("steps", "batch_size"):
        if t[key] < 1:
            raise ConfigError(f"{where} train.{key}: must be >= 1, got {t[key]}")
    for key in ("batch_size", "max_length"):
        if ft[key] < 1:
            raise ConfigError(f"{where} finetune.{key}: must be >= 1, got {ft[key]}")
    if ft["steps"] < 0 or (ft["steps"] == 0 and ft["head"] != "text"):
        raise ConfigError(
            f'{where} finetune.steps: must be >= 1 (0, no fine-tuning, only with head "text"), '
            f"got {ft['steps']}"
        )
    if ft["steps"] == 0 and ft["random_baseline"]:
        raise ConfigError(
            f"{where} finetune.random_baseline: no random start without fine-tuning "
            "(finetune.steps = 0); set it to false"
        )
    check_mix(where, r)


def mix_source_names(r: dict[str, dict[str, Any]]) -> list[str]:
    """Names of a recipe's mixture sources, the arm's own corpus first ("c4" for en)."""
    own = "c4" if r["corpus"]["variant"] == "en" else r["corpus"]["variant"]
    return [own] + [str(s).removeprefix("task:") for s in r.get("mix", {}).get("sources", [])]


def check_mix(where: str, r: dict[str, dict[str, Any]]) -> None:
    """A mixture section: known sources, and the rates the trainer would accept."""
    from c4forge.clean.variants import get_variant
    from c4forge.glue.tasks import get_task, split_file
    from c4forge.trainers.mixture_spec import MixtureSource, MixtureSpec

    mix = r.get("mix")
    if not mix:
        return
    if not mix.get("sources"):
        raise ConfigError(f"{where} mix.sources: no source to mix with the arm's corpus")
    for src in mix["sources"]:
        if not isinstance(src, str):
            raise ConfigError(f"{where} mix.sources: expected strings, got {src!r}")
        try:
            if src.startswith("task:"):
                split_file(get_task(src[5:]), r["finetune"]["data"], "train")
            else:
                get_variant(src)
        except (ConfigError, InputError) as err:
            raise ConfigError(f"{where} mix.sources: {err}") from None
    names = mix_source_names(r)
    rates = mix.get("rates")
    if rates is not None and len(rates) != len(names):
        raise ConfigError(
            f"{where} mix.rates: {len(rates)} rates for {len(names)} sources "
            f"({', '.join(names)}: the arm's corpus first)"
        )
    strategy = mix.get("strategy", "rates" if rates is not None else None)
    if strategy is None:
        raise ConfigError(f"{where} mix: give mix.rates or mix.strategy")
    MixtureSpec(
        sources=tuple(
            MixtureSource(n, n, None if rates is None else rates[i]) for i, n in enumerate(names)
        ),
        strategy=strategy,
        limit=mix.get("limit"),
        temperature=mix.get("temperature"),
        pad=True,
        origin=f"{where} mix",
    )
