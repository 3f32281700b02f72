"""The types of the objective registry: an objective's entry, its own options, and the frozen
configuration of one build.

Types only (the entries are in ``registry``), so that the modules an entry points to
(``examples``, ``bert``) can import ``ObjectiveConfig`` without importing the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

from c4forge.objectives.packing import PACKED_COLUMNS

ENC_DEC_COLUMNS = ("inputs", "targets")
PACKINGS = ("concat", "per_document")
MASKS = ("random", "regular")
DOC_SEPARATORS = ("none", "eos")

RowBlock = tuple[dict[str, np.ndarray], np.ndarray]  # (columns, row keys) of a block of rows


class RowBuilder(Protocol):
    """An example builder: the rows of one clean shard, as (columns, row keys) blocks in
    example order (``examples.piece_rows``, ``bert.bert_row_blocks``)."""

    def __call__(
        self,
        texts: Iterable[str],
        vocab: Any,  # the Vocabulary
        *,
        clean_shard_index: int,
        seed: int,
        config: ObjectiveConfig,
        stats: dict[str, int],  # the objective's counters, updated in place
        dtype: Any,  # the token dtype
        chunk_examples: int,  # examples per block: a memory bound that must not change the rows
        first_document: int = 0,  # the clean-shard index of the first text (a part of the
        # shard, only where ``ObjectiveConfig.splittable``; 0 otherwise)
    ) -> Iterator[RowBlock]: ...


@dataclass(frozen=True)
class ObjectiveOption:
    """An option only one objective has (a CLI flag ``--name-with-dashes`` and an index.json
    key of its ``objective`` block)."""

    name: str
    type: type
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class ObjectiveSpec:
    """One registered objective.

    - ``objective_id``: stable integer mixed into every per-example seed (never renumber).
    - ``configure(spec, *, extra_ids, **options) -> ObjectiveConfig``: validation and derived
      lengths; every refusal is a ConfigError naming the option.
    - ``build_rows``: the example builder (``RowBuilder``).
    - ``layout``: which column layout of formats.md §3.2 its rows have (``formats.shards``).
    - ``columns``: its columns with ``--packing concat``; ``stat_keys``: its counters.
    - ``summary_counts``: (label, stat key) pairs the summary prints; ``summary_sides``: what its
      input / target token counts are.
    - ``description``: what its rows hold, in one line (`shards --objective`'s help).
    - ``options``: its own options; giving one to another objective is an error.
    - T5 piece objectives only: ``concat`` (documents concatenated in groups before cutting),
      ``lengths(inputs_length, d, m, extra_ids) -> (piece length, default targets length)``,
      ``fn`` (the corruption function), ``check_density``, ``masks``, ``vectorised`` (a
      batched implementation exists for the random mask).
    """

    name: str
    objective_id: int
    reference: str
    configure: Callable[..., ObjectiveConfig]
    build_rows: RowBuilder
    layout: str
    columns: tuple[str, ...]
    stat_keys: tuple[str, ...]
    summary_counts: tuple[tuple[str, str], ...]
    summary_sides: str = "input / target tokens"
    description: str = ""  # one line for `shards --help` (what the rows hold)
    options: tuple[ObjectiveOption, ...] = ()
    default_noise_density: float = 0.15
    lengths: Callable[[int, float, float, int], tuple[int, int]] | None = None
    uses_sentinels: int = 1  # minimum extra ids the objective needs
    concat: bool = False
    fn: Callable[..., Any] | None = None
    check_density: Callable[[float], None] | None = None
    masks: tuple[str, ...] = ("random",)
    vectorised: bool = False
    group_keyed: bool = False  # rows depend only on (clean shard, group, piece): see splittable

    def default_lengths(
        self,
        inputs_length: int,
        noise_density: float | None = None,
        mean_noise_span_length: float = 3.0,
    ) -> tuple[int, int]:
        """(inputs_length, targets_length) this objective uses by default (§4's table at 512)."""
        assert self.lengths is not None
        d = self.default_noise_density if noise_density is None else noise_density
        return inputs_length, self.lengths(inputs_length, d, mean_noise_span_length, 100)[1]

    def new_stats(self) -> dict[str, int]:
        return dict.fromkeys(self.stat_keys, 0)


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
    # The objective's own options (ObjectiveSpec.options), as sorted (name, value) pairs.
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def spec(self) -> ObjectiveSpec:
        from c4forge.objectives.registry import OBJECTIVES

        return OBJECTIVES[self.name]

    @property
    def concatenates(self) -> bool:
        return self.concat_documents is not None

    @property
    def splittable(self) -> bool:
        """Whether a clean shard's rows can be built in parts cut at group boundaries, with the
        same rows: one row per example, each drawn from (clean shard, group, piece) alone. Not
        with per-document packing (its windows count examples from the shard's start) nor BERT
        (sentence pairs run across documents)."""
        return self.spec.group_keyed and self.packing == "concat"

    @property
    def group_documents(self) -> int:
        """Documents per group: where a part of a clean shard may start."""
        return self.concat_documents if self.concat_documents is not None else 1

    @property
    def columns(self) -> tuple[str, ...]:
        return PACKED_COLUMNS if self.packing == "per_document" else self.spec.columns

    def option(self, name: str) -> Any:
        """The value of one of the objective's own options."""
        return dict(self.options)[name]

    def descriptor(self) -> dict[str, Any]:
        """The `objective` block of index.json (formats.md §3.3): the common fields, then the
        objective's own options."""
        d = asdict(self)
        d.pop("options")
        d.update(self.options)
        return d


def chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of ``size`` consecutive items (the last one shorter)."""
    pending: list[Any] = []
    for item in items:
        pending.append(item)
        if len(pending) == size:
            yield pending
            pending = []
    if pending:
        yield pending
