"""The stage graph of an experiment: which stages each arm × seed needs, each named by a content key.

A stage's key is the sha256 of its kind, its own configuration and the keys of the stages it
reads, so two arms that agree on everything a stage depends on name the same stage and it runs
once (one clean per corpus, one vocabulary, one shard set per objective …). Changing one arm's
value changes the keys of that arm's stages from the first one the value reaches, and nothing
else. Paths never enter a key (the bundled sample is named by its files' sha256).

The random-start fine-tuning baseline depends only on the architecture, the vocabulary, the
task and the seed, so arms that differ in corpus or objective share it; it borrows the shape
from the pretraining stage of the first run that needs it (its ``after`` stage, not part of its
key), so every stage's prerequisites lie in the run that first claims it (multi-GPU units).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from c4forge.experiments.schema import SAMPLE, Experiment

KEY_FORMAT = 1  # bump when a stage's meaning changes, so old stage folders are not reused
KINDS = ("clean", "vocab", "shards", "taskshards", "pretrain", "finetune")


@dataclass(frozen=True)
class Stage:
    kind: str
    config: dict[str, Any] = field(hash=False, compare=False)
    inputs: tuple[Stage, ...] = field(default=(), hash=False, compare=False)
    after: tuple[Stage, ...] = field(default=(), hash=False, compare=False)  # run-order only
    key: str = ""
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)  # paths

    @property
    def name(self) -> str:
        """The stage's folder name under DIR/stages/."""
        return f"{self.kind}-{self.key[:16]}"


def content_key(kind: str, config: dict[str, Any], inputs: tuple[Stage, ...]) -> str:
    doc = {
        "format": KEY_FORMAT,
        "kind": kind,
        "config": config,
        "inputs": {s.kind: s.key for s in inputs},
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_stage(kind: str, config: dict[str, Any], inputs=(), after=(), params=None) -> Stage:
    """``config`` is the key material; ``params`` (paths) only tell the stage where to read."""
    config = {k: v for k, v in sorted(config.items()) if v is not None}
    key = content_key(kind, config, tuple(inputs))
    return Stage(kind, config, tuple(inputs), tuple(after), key, dict(params or {}))


@dataclass
class RunSpec:
    """One arm × seed: the stages it uses, by role (clean, vocab, shards, pretrain, ft/…)."""

    arm: str
    seed: int
    stages: dict[str, Stage]

    @property
    def folder(self) -> str:
        return f"runs/{self.arm}/seed-{self.seed}"


@dataclass
class Plan:
    stages: list[Stage]  # unique, in a valid execution order
    runs: list[RunSpec]

    def by_key(self) -> dict[str, Stage]:
        return {s.key: s for s in self.stages}


def _file_digests(paths: list[str]) -> list[str]:
    from c4forge.io.storage import sha256

    return [sha256(p) for p in paths]


def corpus_config(corpus: dict[str, Any], digests: dict[str, Any]) -> dict[str, Any]:
    """The clean stage's key material: what changes the documents (no paths, no workers)."""
    inputs = corpus["inputs"]
    if inputs == SAMPLE:
        fingerprint = _cached(digests, SAMPLE, _sample_digest)
    else:
        fingerprint = _cached(digests, tuple(inputs), lambda: _file_digests(list(inputs)))
    cfg = {k: v for k, v in corpus.items() if k not in ("inputs", "url_list", "domain_list")}
    cfg["inputs_sha256"] = fingerprint
    for key in ("url_list", "domain_list"):
        if corpus.get(key):
            path = corpus[key]
            cfg[f"{key}_sha256"] = _cached(digests, path, lambda p=path: _file_digests([p])[0])
    return cfg


def _cached(digests: dict[Any, Any], key: Any, compute: Any) -> Any:
    if key not in digests:
        digests[key] = compute()
    return digests[key]


def _clean_stage(corpus: dict[str, Any], digests: dict[Any, Any]) -> Stage:
    params = {k: corpus.get(k) for k in ("inputs", "url_list", "domain_list")}
    return make_stage("clean", corpus_config(corpus, digests), params=params)


def _sample_digest() -> list[str]:
    """The bundled sample's three source files (the WET wrappers are derived from them)."""
    from c4forge.samples import C4_DOCS, DERIVED_WET, DOLMA_CC, sample_path

    return _file_digests([sample_path(n) for n in (DERIVED_WET, DOLMA_CC, C4_DOCS)])


def experiment_plan(exp: Experiment) -> Plan:
    """Every stage of every arm × seed, deduplicated by key, in execution order."""
    order: dict[str, Stage] = {}
    digests: dict[Any, Any] = {}

    def add(stage: Stage) -> Stage:
        return order.setdefault(stage.key, stage)

    base = exp.arms[exp.base_name]
    runs = []
    # Seed-major: every arm's first seed before any second seed, so an interrupted or
    # still-running experiment already has a one-seed table of every arm.
    for seed in exp.seeds:
        for arm, r in exp.arms.items():
            clean = add(_clean_stage(r["corpus"], digests))
            vocab_source = clean
            if exp.shared_vocab:  # the base corpus's vocabulary for every arm
                vocab_source = add(_clean_stage(base["corpus"], digests))
            vocab = add(make_stage("vocab", dict(r["vocab"]), [vocab_source]))
            shards = add(make_stage("shards", dict(r["shards"]), [clean, vocab]))
            train_cfg = {**r["train"], "seed": seed, "model": dict(r["model"])}
            sources = _mix_sources(r, vocab, add, digests)
            if sources:
                pre = add(_mixed_pretrain(r, train_cfg, shards, vocab, sources))
            else:
                pre = add(make_stage("pretrain", train_cfg, [shards, vocab]))
            roles = {"clean": clean, "vocab": vocab, "shards": shards, "pretrain": pre}
            roles.update({f"mix-{name}": st for name, st in sources})
            skip = ("tasks", "random_baseline", "data")
            ft = {k: v for k, v in r["finetune"].items() if k not in skip}
            files = _task_digests(r["finetune"], digests)
            params = {"data": r["finetune"]["data"]}
            if ft["steps"] == 0:  # the checkpoint's own text head, scored as it is
                ft = {k: v for k, v in ft.items() if k in ("head", "max_length", "batch_size")}
                ft["steps"] = 0
            for task in r["finetune"]["tasks"]:
                cfg = {**ft, "task": task, "data_sha256": files[task], "seed": seed}
                pcfg = {**cfg, "init": "pretrained"}
                roles[f"ft-{task}-pretrained"] = add(
                    make_stage("finetune", pcfg, [pre], params=params)
                )
                if r["finetune"]["random_baseline"]:
                    rcfg = {**cfg, "init": "random", "model": dict(r["model"])}
                    rand = make_stage("finetune", rcfg, [vocab], [pre], params)
                    roles[f"ft-{task}-random"] = add(rand)
            runs.append(RunSpec(arm, seed, roles))
    return Plan(list(order.values()), runs)


def _task_digests(ft: dict[str, Any], digests: dict[Any, Any]) -> dict[str, list[str]]:
    """sha256 of each task's files: the fine-tuning data is named by content, not by path."""
    from c4forge.glue.tasks import get_task, split_file

    out = {}
    for task in ft["tasks"]:
        spec = get_task(task)
        paths = [split_file(spec, ft["data"], s) for s in ("train", *spec.dev_splits)]
        out[task] = [_cached(digests, p, lambda p=p: _file_digests([p])[0]) for p in paths]
    return out


def _mix_sources(r: dict[str, Any], vocab: Stage, add: Any, digests: dict[Any, Any]) -> list:
    """(name, shard stage) of each extra mixture source: a corpus variant of the same inputs
    (its own clean and shards stages, the arm's vocabulary and shard options) or a GLUE task
    (a ``taskshards`` stage: ``c4forge shards task``, rows as long as the arm's inputs)."""
    from c4forge.experiments.schema import mix_source_names

    mix = r.get("mix") or {}
    out = []
    for src, name in zip(mix.get("sources", []), mix_source_names(r)[1:]):
        if src.startswith("task:"):
            ft = r["finetune"]
            cfg = {
                "task": name,
                "inputs_length": r["shards"].get("inputs_length"),
                "targets_length": mix.get("task_targets_length", 16),
                "data_sha256": _task_digests({"tasks": [name], "data": ft["data"]}, digests)[name],
            }
            out.append(
                (name, add(make_stage("taskshards", cfg, [vocab], params={"data": ft["data"]})))
            )
        else:
            clean = add(_clean_stage({**r["corpus"], "variant": src}, digests))
            out.append((name, add(make_stage("shards", dict(r["shards"]), [clean, vocab]))))
    return out


def _mixed_pretrain(
    r: dict[str, Any], train_cfg: dict[str, Any], shards: Stage, vocab: Stage, sources: list
) -> Stage:
    """The pretraining stage of a mixture: every source's stage key is key material (the
    inputs map keeps one stage per kind), and ``params`` names each source's folder."""
    from c4forge.experiments.schema import mix_source_names

    mix = dict(r["mix"])
    names = mix_source_names(r)
    strategy = mix.get("strategy", "rates")
    cfg = {
        **train_cfg,
        "mix": {
            "names": names,
            "keys": [shards.key] + [st.key for _, st in sources],
            "strategy": strategy,
            "rates": mix.get("rates"),
            "limit": mix.get("limit"),
            "temperature": mix.get("temperature"),
        },
    }
    params = {"mix": [[name, st.name] for name, st in sources], "mix_base": names[0]}
    return make_stage("pretrain", cfg, [shards, vocab, *[st for _, st in sources]], params=params)
