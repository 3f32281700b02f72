"""The objective registry: one entry per objective, with named fields (``ObjectiveSpec``).

An entry says how its options are validated (``configure``), how its rows are made
(``build_rows``), which column layout they have, what it counts and what the summary prints.
The CLI's ``--objective`` choices and objective-only flags, the shard schema and the job's
counters are all read from here; ``make_config`` turns options into a frozen
``ObjectiveConfig``, refusing impossible settings before any work (formats.md §3.4). Adding an
objective is adding an entry.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from c4forge.errors import ConfigError
from c4forge.objectives import bert
from c4forge.objectives import functions as fns
from c4forge.objectives.config import (
    DOC_SEPARATORS,
    ENC_DEC_COLUMNS,
    MASKS,
    PACKINGS,
    ObjectiveConfig,
    ObjectiveOption,
    ObjectiveSpec,
)
from c4forge.objectives.examples import STAT_KEYS, piece_rows
from c4forge.objectives.lengths import span_corruption_lengths

__all__ = [
    "BERT_COLUMNS",
    "DOC_SEPARATORS",
    "ENC_DEC_COLUMNS",
    "MASKS",
    "OBJECTIVES",
    "PACKINGS",
    "ObjectiveConfig",
    "ObjectiveOption",
    "ObjectiveSpec",
    "make_config",
    "objective_options",
]

BERT_COLUMNS = (
    "input_ids",
    "token_type_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_label",
)
ENCODER_DECODER = "encoder_decoder"  # formats.md §3.2 column layouts (formats.shards)
BERT_LAYOUT = "mlm_nsp"


def _ceil8(x: float) -> int:
    return max(8, int(math.ceil(x / 8 - 1e-9)) * 8)


# ----------------------------------------------------------------------------- T5 piece objectives


def _span_lengths(i: int, d: float, m: float, extra_ids: int) -> tuple[int, int]:
    return span_corruption_lengths(i, d, m, extra_ids)


def cut_percent(targets_length: int, fits: int) -> int:
    """The share of a ``fits``-token target that a ``targets_length`` row drops, in %."""
    return round(100 * (fits - targets_length) / fits)


def short_targets_warning(cfg: ObjectiveConfig) -> str | None:
    """What ``c4forge shards`` says when ``--targets-length`` is below the length the
    objective's targets take at these settings; None otherwise.

    Span corruption cuts its pieces so that the targets are exactly that long: a shorter row
    cuts every full example's targets (sentinels left without their spans), so that is a
    ``ConfigError``. Elsewhere the length is an expected size, so a warning: longer targets
    are trimmed and counted as ``targets_truncated``. (The library keeps accepting short
    targets: tests build truncated rows on purpose.)"""
    spec = cfg.spec
    if spec.lengths is None or spec.layout == BERT_LAYOUT:
        return None
    fits = spec.lengths(
        cfg.inputs_length, cfg.noise_density, cfg.mean_noise_span_length, cfg.extra_ids
    )[1]
    if cfg.targets_length >= fits:
        return None
    if spec.lengths is _span_lengths:
        raise ConfigError(
            f"--targets-length {cfg.targets_length} is shorter than the {fits} tokens "
            f"{spec.name}'s targets take at --inputs-length {cfg.inputs_length}: "
            f"{cut_percent(cfg.targets_length, fits)} % of target tokens would be dropped; "
            f"leave --targets-length out (it is {fits})"
        )
    return (
        f"--targets-length {cfg.targets_length} is below the {fits} tokens {spec.name}'s "
        f"targets take at --inputs-length {cfg.inputs_length}: about "
        f"{cut_percent(cfg.targets_length, fits)} % of target tokens will be cut "
        f"(--targets-length {fits} keeps them)"
    )


def _minus_one_same(i: int, d: float, m: float, extra_ids: int) -> tuple[int, int]:
    return i - 1, i


# DECISION: the spec fixes 192 (iid_replace_spans) and 104 (iid_drop) at inputs 512, d = 0.15.
# Other settings scale those by the expected target size (∝ d(2−d) resp. ∝ d) and by the piece
# length, rounded up to a multiple of 8, so 512/0.15 gives exactly the spec's numbers.
def _iid_replace_lengths(i: int, d: float, m: float, extra_ids: int) -> tuple[int, int]:
    return i - 1, _ceil8(192 * (i / 512) * (d * (2 - d)) / (0.15 * 1.85))


def _iid_drop_lengths(i: int, d: float, m: float, extra_ids: int) -> tuple[int, int]:
    return i - 1, _ceil8(104 * (i / 512) * d / 0.15)


def _density_in_open_unit(d: float) -> None:
    if not 0.0 < d < 1.0:
        raise ConfigError(f"--noise-density must be in (0, 1), got {d}")


def _density_prefix(d: float) -> None:
    if not 0.0 <= d <= 0.5:
        raise ConfigError(f"prefix_lm needs a noise density <= 0.5 (0.5 = uniform prefix), got {d}")


def _density_fixed_one(d: float) -> None:
    if d != 1.0:
        raise ConfigError("deshuffle permutes every token: its noise density is fixed at 1.0")


def _common_checks(
    spec: ObjectiveSpec, packing: str, mask: str, doc_separator: str, extra_ids: int
) -> None:
    if packing not in PACKINGS:
        raise ConfigError(f"--packing must be one of {PACKINGS}, got {packing!r}")
    if mask not in MASKS:
        raise ConfigError(f"--mask must be one of {MASKS}, got {mask!r}")
    if doc_separator not in DOC_SEPARATORS:
        raise ConfigError(f"--doc-separator must be one of {DOC_SEPARATORS}, got {doc_separator!r}")
    if mask not in spec.masks:
        users = [s.name for s in OBJECTIVES.values() if mask in s.masks]
        raise ConfigError(f"--mask {mask} applies to {', '.join(users)} only")
    if extra_ids < spec.uses_sentinels:
        raise ConfigError(
            f"objective {spec.name} needs at least {spec.uses_sentinels} extra ids, "
            f"vocabulary has {extra_ids}"
        )


def configure_pieces(
    spec: ObjectiveSpec,
    *,
    extra_ids: int = 100,
    inputs_length: int | None = None,
    targets_length: int | None = None,
    noise_density: float | None = None,
    mean_noise_span_length: float = 3.0,
    mask: str = "random",
    packing: str = "concat",
    doc_separator: str = "none",
    pack_window: int = 512,
    concat_documents: int = 128,
    select_random_chunk_max: int = 65536,
) -> ObjectiveConfig:
    """Validation of the T5 objectives (objectives.md §3–5)."""
    assert spec.lengths is not None and spec.check_density is not None
    _common_checks(spec, packing, mask, doc_separator, extra_ids)
    if select_random_chunk_max < 1 or concat_documents < 1:
        raise ConfigError("--concat-documents and the chunk size must be >= 1")
    d = spec.default_noise_density if noise_density is None else float(noise_density)
    m = float(mean_noise_span_length)
    spec.check_density(d)
    if m < 1.0:
        raise ConfigError(f"--mean-noise-span-length must be >= 1, got {m}")
    inputs_length = 512 if inputs_length is None else int(inputs_length)
    if inputs_length < 4:
        raise ConfigError(f"--inputs-length must be >= 4, got {inputs_length}")
    tokens_length, default_targets = spec.lengths(inputs_length, d, m, extra_ids)
    targets_length = default_targets if targets_length is None else int(targets_length)
    if targets_length < 2:
        raise ConfigError(f"--targets-length must be >= 2, got {targets_length}")
    if packing == "per_document" and pack_window < 1:
        raise ConfigError("--pack-window must be >= 1")
    concatenates = spec.concat and packing == "concat"
    return ObjectiveConfig(
        spec.name,
        inputs_length,
        targets_length,
        tokens_length,
        d,
        m,
        mask=mask,
        packing=packing,
        concat_documents=concat_documents if concatenates else None,
        select_random_chunk_max=select_random_chunk_max,
        doc_separator=doc_separator,
        pack_window=pack_window if packing == "per_document" else None,
        extra_ids=extra_ids,
    )


def _piece_objective(
    name: str,
    objective_id: int,
    reference: str,
    *,
    fn: Any,
    concat: bool = True,
    noise_density: float = 0.15,
    lengths: Any = _minus_one_same,
    check_density: Any = _density_in_open_unit,
    uses_sentinels: int = 1,
    masks: tuple[str, ...] = ("random",),
    vectorised: bool = False,
    description: str = "",
) -> ObjectiveSpec:
    """An entry of the T5 family: pieces cut from documents, corrupted by ``fn`` (whose
    parameters are checked now: each must be one the builder passes)."""
    fns.check_signature(name, fn)
    return ObjectiveSpec(
        name=name,
        objective_id=objective_id,
        reference=reference,
        description=description,
        configure=configure_pieces,
        build_rows=piece_rows,
        group_keyed=True,
        layout=ENCODER_DECODER,
        columns=ENC_DEC_COLUMNS,
        stat_keys=STAT_KEYS,
        summary_counts=(
            ("trimmed targets", "targets_truncated"),
            ("dropped >sentinels", "too_many_spans"),
        ),
        default_noise_density=noise_density,
        lengths=lengths,
        uses_sentinels=uses_sentinels,
        concat=concat,
        fn=fn,
        check_density=check_density,
        masks=masks,
        vectorised=vectorised,
    )


# ----------------------------------------------------------------------------- BERT's MLM + NSP

BERT_OPTIONS = (
    ObjectiveOption(
        "max_predictions_per_seq",
        int,
        20,
        "masked positions stored per row (default 20; BERT uses 20 at 128, 80 at 512)",
    ),
    ObjectiveOption(
        "short_seq_prob",
        float,
        0.1,
        "probability of a shorter target length for a pair (default 0.1)",
    ),
    ObjectiveOption(
        "dupe_factor",
        int,
        1,
        "passes over the documents with different masks (default 1; BERT used 10)",
    ),
)


def configure_bert(
    spec: ObjectiveSpec,
    *,
    extra_ids: int = 100,
    max_predictions_per_seq: int,
    short_seq_prob: float,
    dupe_factor: int,
    inputs_length: int | None = None,
    targets_length: int | None = None,
    noise_density: float | None = None,
    mean_noise_span_length: float | None = None,
    mask: str = "random",
    packing: str = "concat",
    doc_separator: str = "none",
    pack_window: int = 512,
    concat_documents: int = 128,
    select_random_chunk_max: int = 65536,
) -> ObjectiveConfig:
    """Validation of bert_mlm_nsp (objectives.md §4.1): 15 % of positions masked with BERT's
    80/10/10 rule, predictions stored in ``max_predictions_per_seq`` slots. Span options,
    --targets-length and per-document packing have no meaning there, so giving one is an error
    rather than a silently ignored flag."""
    ignored = {
        "--targets-length": targets_length is not None,
        "--noise-density": noise_density is not None,
        "--mean-noise-span-length": mean_noise_span_length is not None,
        "--packing per_document": packing != "concat",
        "--doc-separator eos": doc_separator != "none",
    }
    bad = [flag for flag, on in ignored.items() if on]
    if bad:
        raise ConfigError(
            f"{spec.name} does not use {', '.join(bad)} (its rows hold one sentence pair "
            "each; use --inputs-length for max_seq_length and --max-predictions-per-seq)"
        )
    _common_checks(spec, packing, mask, doc_separator, extra_ids)
    if select_random_chunk_max < 1 or concat_documents < 1:
        raise ConfigError("--concat-documents and the chunk size must be >= 1")
    max_seq = 128 if inputs_length is None else inputs_length
    if max_seq < 5:
        raise ConfigError(
            f"bert_mlm_nsp needs --inputs-length (max_seq_length) >= 5, got {max_seq}"
        )
    if not 1 <= max_predictions_per_seq <= max_seq:
        raise ConfigError(f"max_predictions_per_seq must be in 1..{max_seq}")
    if dupe_factor < 1 or not 0.0 <= short_seq_prob <= 1.0:
        raise ConfigError("dupe_factor must be >= 1 and short_seq_prob in [0, 1]")
    return ObjectiveConfig(
        spec.name,
        max_seq,
        max_predictions_per_seq,
        max_seq,
        spec.default_noise_density,
        3.0,
        packing="concat",
        concat_documents=None,
        select_random_chunk_max=select_random_chunk_max,
        extra_ids=extra_ids,
        options=(
            ("dupe_factor", dupe_factor),
            ("max_predictions_per_seq", max_predictions_per_seq),
            ("short_seq_prob", short_seq_prob),
        ),
    )


def _bert_lengths(i: int, d: float, m: float, extra_ids: int) -> tuple[int, int]:
    return i, 20  # max_seq_length, the default max_predictions_per_seq


# ----------------------------------------------------------------------------- the entries

OBJECTIVES: dict[str, ObjectiveSpec] = {
    spec.name: spec
    for spec in (
        _piece_objective(
            "span_corruption",
            0,
            "span.gin",
            lengths=_span_lengths,
            fn=fns.span_corruption,
            masks=MASKS,
            vectorised=True,
            description=(
                "T5's default: each noise span (15 %, mean length 3) becomes one sentinel in the "
                "inputs; targets hold the dropped spans"
            ),
        ),
        _piece_objective(
            "prefix_lm",
            1,
            "prefix_lm.gin",
            concat=False,
            noise_density=0.5,
            fn=fns.prefix_lm,
            check_density=_density_prefix,
            uses_sentinels=0,
            description=(
                "no corruption: the inputs are a random prefix of the piece, the targets the rest"
            ),
        ),
        _piece_objective(
            "bert_t5",
            2,
            "iid_15_r10s90_f.gin",
            fn=fns.bert_t5,
            description=(
                "BERT-style: 15 % of tokens noised (9 in 10 → the mask token, 1 in 10 → a random "
                "id); targets are the whole original piece"
            ),
        ),
        _piece_objective(
            "mass",
            3,
            "iid_15_m_f.gin",
            fn=fns.mass,
            description="MASS-style: 15 % of tokens masked; targets are the whole original piece",
        ),
        _piece_objective(
            "iid_replace_spans",
            4,
            "iid_15_u_u.gin",
            lengths=_iid_replace_lengths,
            fn=fns.iid_replace_spans,
            description=(
                "i.i.d. 15 % noise, each noise run a sentinel in the inputs, each kept run one in "
                "the targets"
            ),
        ),
        _piece_objective(
            "iid_drop",
            5,
            "iid_15_d_d.gin",
            lengths=_iid_drop_lengths,
            fn=fns.iid_drop,
            uses_sentinels=0,
            description=(
                "i.i.d. 15 % noise tokens deleted from the inputs; targets are the deleted tokens"
            ),
        ),
        _piece_objective(
            "deshuffle",
            6,
            "all_permute.gin",
            concat=False,
            noise_density=1.0,
            fn=fns.deshuffle,
            check_density=_density_fixed_one,
            uses_sentinels=0,
            description=(
                "the inputs are the piece's tokens shuffled; targets are the original order"
            ),
        ),
        ObjectiveSpec(
            name="bert_mlm_nsp",
            objective_id=bert.BERT_OBJECTIVE_ID,
            reference="bert create_pretraining_data.py",
            description="BERT's own: sentence pairs with next-sentence labels and 15 % masked "
            "positions (80/10/10), encoder-only rows",
            configure=configure_bert,
            build_rows=bert.bert_row_blocks,
            layout=BERT_LAYOUT,
            columns=BERT_COLUMNS,
            stat_keys=bert.BERT_STAT_KEYS,
            summary_counts=(
                ("sentences", "sentences"),
                ("random next", "random_next"),
                ("truncated tokens", "truncated_tokens"),
            ),
            summary_sides="tokens / masked predictions",
            options=BERT_OPTIONS,
            lengths=_bert_lengths,
            uses_sentinels=3,  # [MASK], [CLS], [SEP]
        ),
    )
}


def objectives_help() -> str:
    """`shards --objective`'s help: every registered objective, its T5 config and what its
    rows hold, one per line (an objective registered later is described with no change to the CLI); its
    ``%`` are doubled, as argparse's help strings need."""
    text = "\n".join(
        f"{name} ({spec.reference}): {spec.description}"
        if spec.description
        else f"{name} ({spec.reference})"
        for name, spec in OBJECTIVES.items()
    )
    return text.replace("%", "%%")


def objective_options() -> dict[str, tuple[ObjectiveOption, ...]]:
    """Each objective's own options (for the CLI's flags)."""
    return {name: spec.options for name, spec in OBJECTIVES.items() if spec.options}


def make_config(name: str = "span_corruption", **options: Any) -> ObjectiveConfig:
    """Validate ``options`` for objective ``name`` (None = the objective's default) and derive
    its lengths; every refusal is a ConfigError naming the option."""
    spec = OBJECTIVES.get(name)
    if spec is None:
        raise ConfigError(f"unknown objective {name!r}; choose from {', '.join(OBJECTIVES)}")
    given = {k: v for k, v in options.items() if v is not None}
    own = {o.name for o in spec.options}
    foreign = [
        o.flag
        for other in OBJECTIVES.values()
        if other is not spec
        for o in other.options
        if o.name in given and o.name not in own
    ]
    if foreign:
        users = sorted(
            {s.name for s in OBJECTIVES.values() for o in s.options if o.flag in foreign}
        )
        raise ConfigError(f"{', '.join(foreign)}: only for --objective {' or '.join(users)}")
    accepted = inspect.signature(spec.configure).parameters
    open_ended = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    unknown = [] if open_ended else sorted(k for k in given if k not in accepted)
    if unknown:
        raise ConfigError(f"objective {name} has no option {', '.join(unknown)}")
    values = {o.name: o.default for o in spec.options} | given
    return spec.configure(spec, **values)
