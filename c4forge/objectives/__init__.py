"""Pretraining objectives, the T5 document pipeline and packing (objectives.md §2–5).

Pure numpy; nothing here reads files or imports Beam, so the shard job, tests and benchmarks
all call the same functions.
"""

from c4forge.objectives.examples import (
    Example,
    ExampleBlock,
    example_blocks,
    example_key,
    new_stats,
    rows_of_block,
    shard_examples,
)
from c4forge.objectives.functions import (
    bert_t5,
    deshuffle,
    iid_drop,
    iid_replace_spans,
    mass,
    prefix_lm,
    span_corruption,
)
from c4forge.objectives.lengths import random_spans_helper, span_corruption_lengths
from c4forge.objectives.noise import random_spans_noise_mask, regular_noise_mask
from c4forge.objectives.registry import OBJECTIVES, ObjectiveConfig, ObjectiveSpec, make_config

__all__ = [
    "OBJECTIVES",
    "Example",
    "ExampleBlock",
    "ObjectiveConfig",
    "ObjectiveSpec",
    "bert_t5",
    "deshuffle",
    "example_blocks",
    "example_key",
    "iid_drop",
    "iid_replace_spans",
    "make_config",
    "mass",
    "new_stats",
    "prefix_lm",
    "random_spans_helper",
    "random_spans_noise_mask",
    "regular_noise_mask",
    "rows_of_block",
    "shard_examples",
    "span_corruption",
    "span_corruption_lengths",
]
