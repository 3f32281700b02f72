"""The clean job as data: an ordered plan of stages, built from a ``CleanJob``.

A stage has a name (its counter namespace, the funnel's row), the per-element functions it
runs, and the key it shuffles on, if any. Each stage is one module that holds its rules, its
``Flow``, those functions and a ``stage(job)`` that builds it (``c4forge.rules.*``,
``c4forge.dedup.*``, ``c4forge.langid.stage``, ``c4forge.contamination.stage``); the kinds of
stage live in ``c4forge.corpus.stages`` (below every stage room); this module holds
``build_plan``, which lists them in order. ``clean.passes`` runs
the plan keys-only through the engine primitives (``c4forge.engines.base``), so Beam, Spark
and the local engine run the same plan: per-element stages inside the per-chunk passes,
corpus-wide stages (``CorpusStage``: ``emit`` keys → ``decide`` → ``apply``) as shuffles of
keys and ``(chunk, record)`` ids; nothing else knows the stage order.

Shape of a plan (c4_rules.md §1)::

    read ─ page_stages (per page: length) ─ url_dedup (shuffle: normalized URL)
         ─ clean (page → Doc) ─ doc_stages (dedup, near_dedup, langid, badwords, split)

``page_stages`` + ``clean`` form the front, run per chunk of inputs (``passes.front``: clean
before URL dedup, its counters kept per page and counted for the URL-dedup survivor only).
The last doc stage yields ``(output key, OutDoc)`` pairs; the engine writes one group of
files per key (the train/validation shards today).

A variant is a different plan: a domain filter is one more ``MapStage`` in ``page_stages``, a
URL-list join a ``ListJoinStage``, a paragraph filter a ``MapStage`` after ``clean``, another
language ID a different ``langid`` function, per-language outputs a different final stage's key.

Accounting comes from the plan: each stage carries the ``Flow`` of what it counts (its drops,
kept and info reasons, its funnel label; defined by the module that counts them), and
``Plan.accounts`` lists them in stage order, the read step's first. stats.json's reasons
(zeros included), the conservation identities and the summary's funnel are all read from it,
so a new stage with a ``flow`` shows up in all three; a stage with ``flow=None`` counts
nothing and is not a funnel row (the as-is ``clean`` slot of ``en.noclean``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from c4forge.corpus.counting import Flow
from c4forge.corpus.stages import READ_STAGE, CorpusStage, Fn, GroupStage, MapStage

if TYPE_CHECKING:
    from c4forge.clean.config import CleanJob


@dataclass(frozen=True)
class Plan:
    read: Fn  # (path, count) -> pages, counted under READ_STAGE
    read_flow: Flow  # what the read counts (files, records and how each record ended)
    page_stages: tuple[MapStage, ...]
    url_dedup: GroupStage
    clean: MapStage
    doc_stages: tuple[Any, ...]
    dedup: str
    near_dedup: bool
    language_id: str = "langdetect"  # "cld3" for --variant multilingual

    @property
    def accounts(self) -> tuple[tuple[str, Flow], ...]:
        """``(stage, Flow)`` of every counting stage in order, the read first: stats.json's
        reasons, the conservation identities and the summary's funnel are read from it."""
        counted = ((s.name, s.flow) for s in self.stages if s.flow is not None)
        return ((READ_STAGE, self.read_flow), *counted)

    @property
    def funnel(self) -> tuple[str, ...]:
        """The page-flow stages in order (the names of ``accounts``)."""
        return tuple(name for name, _ in self.accounts)

    def segments(self) -> list[tuple[tuple[MapStage, ...], Any]]:
        """The doc stages cut at each corpus-wide stage: ``(maps, corpus stage or None)``, one
        per chunk pass (the last one's maps end in the output key)."""
        out: list[tuple[tuple[MapStage, ...], Any]] = []
        maps: list[MapStage] = []
        for stage in self.doc_stages:
            if isinstance(stage, CorpusStage):
                out.append((tuple(maps), stage))
                maps = []
            else:
                maps.append(stage)
        out.append((tuple(maps), None))
        return out

    @property
    def stages(self) -> tuple[Any, ...]:
        """Every stage after ``read``, in order."""
        return (*self.page_stages, self.url_dedup, self.clean, *self.doc_stages)

    def describe(self) -> list[dict[str, Any]]:
        """Name, kind and shuffle key of each stage (for logs and docs)."""
        out = [{"stage": READ_STAGE, "kind": "read", "shuffle_key": None}]
        for s in self.stages:
            out.append({"stage": s.name, "kind": type(s).__name__, "shuffle_key": s.shuffle_key})
        return out


def build_plan(job: CleanJob) -> Plan:
    """The stages of c4_rules.md §1 for ``job`` (a ``CleanJob``), in the reference order; the
    job's corpus variant (TFDS ``_get_pages_pcollection``) adds, swaps or drops stages:
    read → length → [realnews] → URL dedup → clean or [as-is] → [webtext join] →
    [paragraph] → [dedup] → [near-dedup] → [decontaminate] → langdetect or [CLD3] → [bad words]
    → [exact substrings: winnowing pass, strike pass] → split.

    Each stage is one module with a ``stage(job)`` that returns the stage for this job, or
    ``None`` when the job does not run it; this function only lists them, in order.

    ``--input-format c4`` (a clean corpus) keeps read → URL dedup → the page as it is → the
    corpus-wide stages asked for → split: the crawl rules ran when the corpus was made.

    The URL-list join and the paragraph filter follow ``clean`` as document stages, so the
    resumable fronts (clean per page, before URL dedup) stay as they are. The documents are
    the reference's: the join decides on the normalized URL alone and the paragraph filter runs
    where there is no clean step. One consequence: with ``webtextlike`` the clean counters
    also count pages that the list then drops.
    """
    from c4forge import readers
    from c4forge.contamination import stage as decontaminate
    from c4forge.dedup import exact, minhash, substrings, urls
    from c4forge.langid import stage as langid
    from c4forge.readers.warc_html import READ_FLOW
    from c4forge.rules import badwords, lines, paragraphs, realnews, split, url_list

    def present(*stages: Any) -> tuple[Any, ...]:
        return tuple(s for s in stages if s is not None)

    # documents of a clean corpus (--input-format c4): as they are, through the corpus-wide
    # stages only; a crawl also gets the page rules and the per-document filters
    crawl = job.input_format != "c4"
    return Plan(
        read=readers.stage(job),
        read_flow=READ_FLOW,
        page_stages=present(lines.length_stage(job), realnews.stage(job)) if crawl else (),
        url_dedup=urls.stage(job),
        clean=lines.stage(job) if crawl else lines.as_is_stage(job),
        doc_stages=present(
            *((url_list.stage(job), paragraphs.stage(job)) if crawl else ()),
            exact.stage(job),
            minhash.stage(job),
            decontaminate.stage(job),
            *((langid.stage(job), badwords.stage(job)) if crawl else ()),
            *substrings.stage(job),
            split.stage(job),
        ),
        dedup=job.dedup,
        near_dedup=job.near_dedup == "minhash",
        language_id="cld3" if job.spec.multilingual else "langdetect",
    )


def recorded_job(config: dict[str, Any]) -> CleanJob:
    """The ``CleanJob`` a finished run's stats.json ``config`` records, for reading its plan.

    Every field the record leaves out keeps ``CleanJob``'s default, so a stage that reads a
    new field finds it here too. Built without ``__post_init__``: its checks load the variant's
    resources (URL lists, the domain list, CLD3, the evaluation sets), which a plan read for its
    accounting never uses; they are left empty (``domains`` None, no URL-list files, no
    n-gram index)."""
    from c4forge.clean.config import CleanJob
    from c4forge.clean.variants import get_variant

    values: dict[str, Any] = {}
    for f in dataclasses.fields(CleanJob):
        if f.default is not dataclasses.MISSING:
            values[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            values[f.name] = f.default_factory()
    variant = get_variant(config.get("variant", {}).get("name", "en"))
    substrings = config.get("dedup_substrings") or {}
    shards = config.get("shards") or {}
    as_recorded = (
        "language",
        "format",
        "input_format",
        "max_record_bytes",
        "near_dedup",
        "keep_samples",
    )
    values.update({k: config[k] for k in as_recorded if k in config})
    values.update({f"{s}_shards": shards[s] for s in ("train", "validation") if s in shards})
    values.update(config.get("near_dedup_params") or {})  # ngram, num_perm, threshold
    values.update(
        inputs=(),
        output="",
        variant=variant.name,
        dedup=config.get("dedup") or "spans",
        badwords_fraction=config.get("badwords_fraction", variant.badwords_fraction),
        decontaminate=tuple(config.get("decontaminate") or ()),  # the benchmarks' names
        languages=tuple(config.get("languages") or ()),
        dedup_substrings=int(substrings.get("bytes", 0)),
        substrings_keep=substrings.get("keep", "none"),
    )
    job = object.__new__(CleanJob)
    for name, value in values.items():
        object.__setattr__(job, name, value)
    for name, empty in (("domains", None), ("url_list_files", ()), ("benchmarks", (None, None))):
        object.__setattr__(job, name, empty)  # the cached resources, never loaded
    return job


def recorded_plan(config: dict[str, Any]) -> Plan:
    """The plan of a finished run, from its stats.json ``config`` (a summary or a chart of a
    run read back with no job at hand); only its accounting may be used."""
    return build_plan(recorded_job(config))


def all_accounts() -> tuple[tuple[str, Flow], ...]:
    """Every stage any plan can have, in stage order, from the plans of every variant and
    dedup mode with every optional stage on; a stage whose flow differs between plans (exact
    dedup per mode, langdetect or CLD3) gets the union of their info reasons. For counters read
    back with no config at hand (a funnel of stats.json's counters alone)."""
    from c4forge.clean.variants import VARIANTS

    order: list[str] = []
    flows: dict[str, Flow] = {}
    for v in VARIANTS.values():
        for mode in v.dedup_modes:
            every = {
                "variant": {"name": v.name},
                "dedup": mode,
                "near_dedup": "minhash",
                "decontaminate": {"any": {}},
                "dedup_substrings": {"bytes": 1},
            }
            plan = build_plan(recorded_job(every))
            names = plan.funnel
            for i, (name, flow) in enumerate(plan.accounts):
                if name in flows:
                    old = flows[name]
                    flows[name] = old._replace(info=tuple(dict.fromkeys(old.info + flow.info)))
                    continue
                after = [n for n in names[i + 1 :] if n in flows]  # before the next one known
                order.insert(order.index(after[0]) if after else len(order), name)
                flows[name] = flow
    return tuple((name, flows[name]) for name in order)
