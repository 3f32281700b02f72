"""The objective registry and the validated configuration of one shard build.

`OBJECTIVES[name]` says how an objective cuts documents (concatenated or not, piece length),
its default row lengths, its function and its output columns. `make_config` turns CLI options
into a frozen `ObjectiveConfig`, refusing impossible settings before any work (formats.md §3.4).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from c4forge.errors import ConfigError
from c4forge.objectives import functions as fns
from c4forge.objectives.lengths import span_corruption_lengths
from c4forge.objectives.packing import PACKED_COLUMNS

ENC_DEC_COLUMNS = ("inputs", "targets")
BERT_COLUMNS = (
    "input_ids",
    "token_type_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_label",
)


def _ceil8(x: float) -> int:
    return max(8, int(math.ceil(x / 8 - 1e-9)) * 8)


@dataclass(frozen=True)
class ObjectiveSpec:
    """How one objective turns documents into examples.

    - `objective_id`: stable integer mixed into every per-example seed (never renumber).
    - `concat`: documents are concatenated (in groups) before cutting pieces.
    - `piece_length(inputs_length, d, m)`: tokens per piece before corruption.
    - `default_targets_length(inputs_length, d, m)`.
    - `fn(tokens, rng, *, vocab_size, noise_density, mean_noise_span_length, mask, extra_ids)`.
    """

    name: str
    objective_id: int
    t5_config: str
    concat: bool
    default_noise_density: float
    piece_length: Callable[[int, float, float], int]
    default_targets_length: Callable[[int, float, float], int]
    fn: Callable[..., Any] | None
    columns: tuple[str, ...] = ENC_DEC_COLUMNS
    uses_sentinels: int = 1  # minimum extra ids the objective needs
    encoder_only: bool = False

    def default_lengths(
        self,
        inputs_length: int,
        noise_density: float | None = None,
        mean_noise_span_length: float = 3.0,
    ) -> tuple[int, int]:
        """(inputs_length, targets_length) this objective uses by default (§4's table at 512)."""
        d = self.default_noise_density if noise_density is None else noise_density
        return inputs_length, self.default_targets_length(inputs_length, d, mean_noise_span_length)


def _span_piece(i: int, d: float, m: float) -> int:
    return span_corruption_lengths(i, d, m)[0]


def _span_targets(i: int, d: float, m: float) -> int:
    return span_corruption_lengths(i, d, m)[1]


def _minus_one(i: int, d: float, m: float) -> int:
    return i - 1


def _same(i: int, d: float, m: float) -> int:
    return i


# DECISION: the spec fixes 192 (iid_replace_spans) and 104 (iid_drop) at inputs 512, d = 0.15.
# Other settings scale those by the expected target size (∝ d(2−d) resp. ∝ d) and by the piece
# length, rounded up to a multiple of 8, so 512/0.15 gives exactly the spec's numbers.
def _iid_replace_targets(i: int, d: float, m: float) -> int:
    return _ceil8(192 * (i / 512) * (d * (2 - d)) / (0.15 * 1.85))


def _iid_drop_targets(i: int, d: float, m: float) -> int:
    return _ceil8(104 * (i / 512) * d / 0.15)


OBJECTIVES: dict[str, ObjectiveSpec] = {
    "span_corruption": ObjectiveSpec(
        "span_corruption",
        0,
        "span.gin",
        True,
        0.15,
        _span_piece,
        _span_targets,
        fns.span_corruption,
    ),
    "prefix_lm": ObjectiveSpec(
        "prefix_lm",
        1,
        "prefix_lm.gin",
        False,
        0.5,
        _minus_one,
        _same,
        fns.prefix_lm,
        uses_sentinels=0,
    ),
    "bert_t5": ObjectiveSpec(
        "bert_t5", 2, "iid_15_r10s90_f.gin", True, 0.15, _minus_one, _same, fns.bert_t5
    ),
    "mass": ObjectiveSpec("mass", 3, "iid_15_m_f.gin", True, 0.15, _minus_one, _same, fns.mass),
    "iid_replace_spans": ObjectiveSpec(
        "iid_replace_spans",
        4,
        "iid_15_u_u.gin",
        True,
        0.15,
        _minus_one,
        _iid_replace_targets,
        fns.iid_replace_spans,
    ),
    "iid_drop": ObjectiveSpec(
        "iid_drop",
        5,
        "iid_15_d_d.gin",
        True,
        0.15,
        _minus_one,
        _iid_drop_targets,
        fns.iid_drop,
        uses_sentinels=0,
    ),
    "deshuffle": ObjectiveSpec(
        "deshuffle",
        6,
        "all_permute.gin",
        False,
        1.0,
        _minus_one,
        _same,
        fns.deshuffle,
        uses_sentinels=0,
    ),
    # BERT's own MLM + NSP works on sentence lists, not pieces: see objectives/bert.py.
    "bert_mlm_nsp": ObjectiveSpec(
        "bert_mlm_nsp",
        7,
        "bert create_pretraining_data.py",
        False,
        0.15,
        _same,
        lambda i, d, m: 20,
        None,
        BERT_COLUMNS,
        uses_sentinels=3,
        encoder_only=True,
    ),
}

PACKINGS = ("concat", "per_document")
MASKS = ("random", "regular")
DOC_SEPARATORS = ("none", "eos")


@dataclass(frozen=True)
class ObjectiveConfig:
    """Everything that decides the examples of a build; `descriptor()` goes into index.json."""

    name: str
    inputs_length: int
    targets_length: int
    tokens_length: int
    noise_density: float
    mean_noise_span_length: float
    mask: str = "random"
    packing: str = "concat"
    concat_documents: int | None = 128
    select_random_chunk_max: int = 65536
    doc_separator: str = "none"
    pack_window: int | None = None
    extra_ids: int = 100
    # bert_mlm_nsp only (None elsewhere)
    max_predictions_per_seq: int | None = None
    short_seq_prob: float | None = None
    dupe_factor: int | None = None

    @property
    def spec(self) -> ObjectiveSpec:
        return OBJECTIVES[self.name]

    @property
    def concatenates(self) -> bool:
        return self.concat_documents is not None

    @property
    def columns(self) -> tuple[str, ...]:
        if self.spec.encoder_only:
            return self.spec.columns
        return PACKED_COLUMNS if self.packing == "per_document" else ENC_DEC_COLUMNS

    def descriptor(self) -> dict[str, Any]:
        """The `objective` block of index.json (formats.md §3.3); bert-only keys when relevant."""
        d = asdict(self)
        if not self.spec.encoder_only:
            for k in ("max_predictions_per_seq", "short_seq_prob", "dupe_factor"):
                d.pop(k)
        return d


def make_config(
    name: str = "span_corruption",
    *,
    inputs_length: int | None = None,
    targets_length: int | None = None,
    noise_density: float | None = None,
    mean_noise_span_length: float = 3.0,
    mask: str = "random",
    packing: str = "concat",
    doc_separator: str = "none",
    pack_window: int = 512,
    extra_ids: int = 100,
    concat_documents: int = 128,
    select_random_chunk_max: int = 65536,
    max_predictions_per_seq: int = 20,
    short_seq_prob: float = 0.1,
    dupe_factor: int = 1,
) -> ObjectiveConfig:
    """Validate options and derive lengths; every refusal is a ConfigError naming the option."""
    if name not in OBJECTIVES:
        raise ConfigError(f"unknown objective {name!r}; choose from {', '.join(OBJECTIVES)}")
    spec = OBJECTIVES[name]
    if packing not in PACKINGS:
        raise ConfigError(f"--packing must be one of {PACKINGS}, got {packing!r}")
    if mask not in MASKS:
        raise ConfigError(f"--mask must be one of {MASKS}, got {mask!r}")
    if doc_separator not in DOC_SEPARATORS:
        raise ConfigError(f"--doc-separator must be one of {DOC_SEPARATORS}, got {doc_separator!r}")
    if mask == "regular" and name != "span_corruption":
        raise ConfigError("--mask regular applies to span_corruption only")
    if extra_ids < spec.uses_sentinels:
        raise ConfigError(
            f"objective {name} needs at least {spec.uses_sentinels} extra ids, vocabulary has {extra_ids}"
        )
    if select_random_chunk_max < 1 or concat_documents < 1:
        raise ConfigError("--concat-documents and the chunk size must be >= 1")
    d = spec.default_noise_density if noise_density is None else float(noise_density)
    m = float(mean_noise_span_length)
    if name == "deshuffle" and d != 1.0:
        raise ConfigError("deshuffle permutes every token: its noise density is fixed at 1.0")
    if name == "prefix_lm" and not 0.0 <= d <= 0.5:
        raise ConfigError(f"prefix_lm needs a noise density <= 0.5 (0.5 = uniform prefix), got {d}")
    if name not in ("deshuffle", "prefix_lm") and not 0.0 < d < 1.0:
        raise ConfigError(f"--noise-density must be in (0, 1), got {d}")
    if m < 1.0:
        raise ConfigError(f"--mean-noise-span-length must be >= 1, got {m}")

    if spec.encoder_only:
        max_seq = 128 if inputs_length is None else inputs_length
        if max_seq < 5:
            raise ConfigError(
                f"bert_mlm_nsp needs --inputs-length (max_seq_length) >= 5, got {max_seq}"
            )
        if packing != "concat":
            raise ConfigError("bert_mlm_nsp rows are not packed: use --packing concat")
        if not 1 <= max_predictions_per_seq <= max_seq:
            raise ConfigError(f"max_predictions_per_seq must be in 1..{max_seq}")
        if dupe_factor < 1 or not 0.0 <= short_seq_prob <= 1.0:
            raise ConfigError("dupe_factor must be >= 1 and short_seq_prob in [0, 1]")
        return ObjectiveConfig(
            name,
            max_seq,
            targets_length or max_predictions_per_seq,
            max_seq,
            d,
            m,
            packing="concat",
            concat_documents=None,
            select_random_chunk_max=select_random_chunk_max,
            extra_ids=extra_ids,
            max_predictions_per_seq=max_predictions_per_seq,
            short_seq_prob=short_seq_prob,
            dupe_factor=dupe_factor,
        )

    inputs_length = 512 if inputs_length is None else int(inputs_length)
    if inputs_length < 4:
        raise ConfigError(f"--inputs-length must be >= 4, got {inputs_length}")
    if name == "span_corruption":
        tokens_length, default_targets = span_corruption_lengths(inputs_length, d, m, extra_ids)
    else:
        tokens_length = spec.piece_length(inputs_length, d, m)
        default_targets = spec.default_targets_length(inputs_length, d, m)
    targets_length = default_targets if targets_length is None else int(targets_length)
    if targets_length < 2:
        raise ConfigError(f"--targets-length must be >= 2, got {targets_length}")
    if packing == "per_document" and pack_window < 1:
        raise ConfigError("--pack-window must be >= 1")
    concatenates = spec.concat and packing == "concat"
    return ObjectiveConfig(
        name,
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
