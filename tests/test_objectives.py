"""Span corruption and the other T5 objectives against objectives.md §3–4 and the §6 invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from objective_references import random_composition, span_corruption_ragged

from c4forge.errors import ConfigError
from c4forge.objectives import (
    OBJECTIVES,
    bert_t5,
    deshuffle,
    iid_drop,
    iid_replace_spans,
    make_config,
    mass,
    prefix_lm,
    random_spans_helper,
    random_spans_noise_mask,
    regular_noise_mask,
    span_corruption,
    span_corruption_lengths,
)
from c4forge.objectives import noise as nz
from c4forge.objectives import transforms as tf
from c4forge.objectives.functions import span_corruption_batch
from c4forge.objectives.lengths import max_inputs_length
from c4forge.objectives.seeding import keyed_rng, piece_key128, piece_rng

V = 32100  # T5's V (pieces + 100 extra ids)
EOS = 1


def is_sentinel(x: np.ndarray, v: int = V) -> np.ndarray:
    return x >= v - 100


def reconstruct(inputs: np.ndarray, targets: np.ndarray, v: int = V) -> np.ndarray:
    """§6.4: replace each input sentinel by the tokens that follow it in the targets."""
    assert inputs[-1] == EOS and targets[-1] == EOS
    ins, tgs = inputs[:-1], targets[:-1]
    spans: dict[int, list[int]] = {}
    current = None
    for t in tgs.tolist():
        if t >= v - 100:
            current = t
            spans[current] = []
        else:
            assert current is not None, "targets must start with a sentinel"
            spans[current].append(t)
    out: list[int] = []
    for t in ins.tolist():
        out.extend(spans[t] if t >= v - 100 else [t])
    return np.array(out, dtype=np.int32)


def runs_of(mask: np.ndarray) -> list[tuple[bool, int]]:
    out: list[tuple[bool, int]] = []
    for m in mask.tolist():
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1] + 1)
        else:
            out.append((m, 1))
    return out


# --- §3.2 the paper example -----------------------------------------------------------------------


def test_paper_example_in_t5_ids():
    tokens = np.array([1562, 25, 21, 14256, 140, 12, 39, 1088, 336, 471, 5], dtype=np.int32)
    mask = np.zeros(11, dtype=bool)
    mask[[2, 3, 4]] = True  # "for inviting me"
    mask[[6, 7, 8]] = True  # "your party last"
    inputs = tf.append_eos(tf.noise_span_to_unique_sentinel(tokens, mask, V))
    targets = tf.append_eos(tf.nonnoise_span_to_unique_sentinel(tokens, mask, V))
    assert inputs.tolist() == [1562, 25, 32099, 12, 32098, 471, 5, 1]
    assert targets.tolist() == [32099, 21, 14256, 140, 32098, 39, 1088, 336, 32097, 1]


# --- §3.1 / §6.1-6.7 span corruption invariants ---------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(length=st.integers(1, 1500), seed=st.integers(0, 2**32 - 1), low=st.integers(3, 30000))
def test_span_corruption_invariants(length, seed, low):
    tokens = (np.arange(length, dtype=np.int64) * 7919 + low) % (V - 103) + 3
    inputs, targets = span_corruption(tokens, np.random.default_rng(seed), vocab_size=V)
    # 6.1 exactly one appended EOS each (EOS never appears in our tokens otherwise)
    assert inputs[-1] == EOS and targets[-1] == EOS
    assert np.count_nonzero(inputs == EOS) == 1 and np.count_nonzero(targets == EOS) == 1
    if length == 1:  # 6.6
        assert inputs.tolist() == [tokens[0], 1] and targets.tolist() == [V - 1, 1]
        return
    n = min(max(round(length * 0.15), 1), length - 1)
    s = max(1, round(n / 3.0))
    # 6.2 lengths
    assert len(inputs) == length - n + s + 1
    assert len(targets) == n + s + 1
    # 6.3 sentinels V-1, V-2, ... in order, same list on both sides
    in_s = inputs[is_sentinel(inputs)]
    tg_s = targets[is_sentinel(targets)]
    assert in_s.tolist() == list(range(V - 1, V - 1 - s, -1))
    assert tg_s.tolist() == in_s.tolist()
    # 6.4 reconstruction
    assert np.array_equal(reconstruct(inputs, targets), tokens)
    # 6.5 alternation
    assert not is_sentinel(inputs[:1])[0]
    assert targets[0] == V - 1
    flags = is_sentinel(inputs[:-1])
    assert not np.any(flags[1:] & flags[:-1]), "two adjacent sentinels in inputs"
    tflags = is_sentinel(targets[:-1])
    assert not np.any(tflags[1:] & tflags[:-1]), "empty noise span"
    assert not tflags[-1], "the last piece position must be noise"


@pytest.mark.parametrize("length", list(range(2, 31)))
def test_short_pieces_noise_is_the_tail(length):
    n = min(max(round(length * 0.15), 1), length - 1)
    for seed in range(5):
        mask = random_spans_noise_mask(length, np.random.default_rng(seed))
        assert mask.tolist() == [False] * (length - n) + [True] * n


def test_mask_of_length_one_and_zero_density():
    assert random_spans_noise_mask(1, np.random.default_rng(0)).tolist() == [False]
    assert not random_spans_noise_mask(50, np.random.default_rng(0), noise_density=0.0).any()


@settings(max_examples=60, deadline=None)
@given(length=st.integers(2, 2000), seed=st.integers(0, 2**63 - 1))
def test_mask_depends_only_on_length_and_seed(length, seed):
    a = np.random.default_rng(1).integers(3, 30000, length)
    b = np.random.default_rng(2).integers(3, 30000, length)
    ia, ta = span_corruption(a, np.random.default_rng(seed), vocab_size=V)
    ib, tb = span_corruption(b, np.random.default_rng(seed), vocab_size=V)
    assert np.array_equal(is_sentinel(ia), is_sentinel(ib))
    assert np.array_equal(is_sentinel(ta), is_sentinel(tb))
    mask = random_spans_noise_mask(length, np.random.default_rng(seed))
    assert not mask[0] and mask[-1]
    # the same mask through the generic T5 encoders gives the same example
    gi = tf.append_eos(tf.noise_span_to_unique_sentinel(a.astype(np.int32), mask, V))
    assert np.array_equal(gi, ia)


def test_seeds_change_masks_and_token_ids_are_opaque():
    masks = {random_spans_noise_mask(568, np.random.default_rng(s)).tobytes() for s in range(20)}
    assert len(masks) == 20
    # ids 1 and 2 inside a piece are ordinary tokens: the example still reconstructs
    tokens = np.array([1, 2, 1, 2, 5, 6, 7, 1, 2, 9] * 10, dtype=np.int32)
    inputs, targets = span_corruption(tokens, np.random.default_rng(3), vocab_size=V)
    assert np.array_equal(reconstruct(inputs, targets), tokens)


def _composition_pmf(total: int, parts: int, j: int) -> float:
    return math.comb(total - j - 1, parts - 2) / math.comb(total - 1, parts - 1)


@pytest.mark.parametrize("total,parts", [(20, 4), (12, 2), (30, 6)])
def test_uniform_composition_pmf(total, parts):
    """First-run length follows C(N−j−1, s−2)/C(N−1, s−1) (chi-square, fixed seed)."""
    rng = np.random.default_rng(12345)
    draws = 20000
    comps = np.stack([random_composition(total, parts, rng) for _ in range(draws)])
    assert (comps >= 1).all() and (comps.sum(axis=1) == total).all()
    for col in (0, parts - 1):  # every part has the same marginal law
        counts = np.bincount(comps[:, col], minlength=total + 1)
        chi2, df = 0.0, 0
        for j in range(1, total - parts + 2):
            expected = draws * _composition_pmf(total, parts, j)
            if expected >= 5:
                chi2 += (counts[j] - expected) ** 2 / expected
                df += 1
        df -= 1
        # mean df, sd sqrt(2 df): 6 sd is a bound a correct sampler essentially never crosses
        assert chi2 < df + 6 * math.sqrt(2 * df), (col, chi2, df)


def test_whole_compositions_are_equally_likely():
    rng = np.random.default_rng(7)
    total, parts, draws = 7, 3, 30000  # C(6, 2) = 15 compositions
    seen: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        key = tuple(random_composition(total, parts, rng).tolist())
        seen[key] = seen.get(key, 0) + 1
    assert len(seen) == math.comb(total - 1, parts - 1)
    expected = draws / len(seen)
    chi2 = sum((c - expected) ** 2 / expected for c in seen.values())
    assert chi2 < 14 + 6 * math.sqrt(28)


def test_noise_and_kept_splits_are_independent_and_run_laws_hold():
    """On L = 100 (n = 15, s = 5, k = 85): run laws of the mask and a 2-way independence check."""
    draws = 6000
    first_noise = np.empty(draws, dtype=np.int64)
    first_keep = np.empty(draws, dtype=np.int64)
    for i in range(draws):
        runs = runs_of(random_spans_noise_mask(100, np.random.default_rng(i)))
        assert [m for m, _ in runs] == [False, True] * 5
        first_keep[i], first_noise[i] = runs[0][1], runs[1][1]
    # noise first run law for N = 15, s = 5
    for j in (1, 2, 3):
        p = _composition_pmf(15, 5, j)
        assert abs(np.mean(first_noise == j) - p) < 5 * math.sqrt(p * (1 - p) / draws)
    # independence: P(noise small & keep small) ≈ P(noise small)·P(keep small)
    a, b = first_noise <= 2, first_keep <= 12
    joint, prod = np.mean(a & b), np.mean(a) * np.mean(b)
    assert abs(joint - prod) < 5 * math.sqrt(prod * (1 - prod) / draws)


def test_batch_equals_one_by_one_and_keyed_rng_is_philox():
    pieces = np.random.default_rng(0).integers(3, 30000, (6, 568)).astype(np.int32)
    ins, tgs = span_corruption_batch(
        pieces, (piece_rng(5, 0, 2, 9, p) for p in range(6)), vocab_size=V
    )
    for p in range(6):
        i1, t1 = span_corruption(pieces[p], piece_rng(5, 0, 2, 9, p), vocab_size=V)
        assert np.array_equal(ins[p], i1) and np.array_equal(tgs[p], t1)
        assert len(i1) == 512 and len(t1) == 114
    key = piece_key128(5, 0, 2, 9, 3)
    ref = np.random.Generator(np.random.Philox(key=key)).random(10)
    keyed_rng(piece_key128(1, 1, 1, 1, 1)).random(7)  # leave the shared generator mid-stream
    assert np.array_equal(keyed_rng(key).random(10), ref)
    assert piece_key128(0, 0, 0, 0, 1) != piece_key128(0, 0, 0, 1, 0)


def test_regular_mask_is_periodic():
    for seed in range(10):
        mask = regular_noise_mask(500, np.random.default_rng(seed))
        starts = np.flatnonzero(mask & ~np.r_[False, mask[:-1]])
        lengths = {r for m, r in runs_of(mask)[1:-1] if m}
        assert len(lengths) == 1 and 1 <= lengths.pop() <= 5
        assert len(set(np.diff(starts[1:]).tolist())) == 1  # (a span at 0 may be cut short)
        assert abs(mask.mean() - 0.15) < 0.05
    inputs, targets = span_corruption(
        np.arange(3, 503), np.random.default_rng(0), vocab_size=V, mask="regular"
    )
    assert inputs[-1] == 1 and targets[-1] == 1


# --- §3.3 lengths ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs_length,tokens_length,targets_length",
    [
        (64, 70, 14),
        (128, 141, 29),
        (256, 284, 58),
        (512, 568, 114),
        (1024, 1137, 229),
        (2048, 2274, 456),
    ],
)
def test_lengths_table(inputs_length, tokens_length, targets_length):
    assert random_spans_helper(inputs_length, 0.15, 3.0) == (tokens_length, targets_length)


@pytest.mark.parametrize(
    "d,m,expected",
    [
        (0.15, 2.0, (552, 126)),
        (0.15, 5.0, (581, 105)),
        (0.15, 10.0, (591, 99)),
        (0.10, 3.0, (548, 74)),
        (0.25, 3.0, (614, 206)),
        (0.5, 3.0, (766, 512)),
    ],
)
def test_lengths_other_settings(d, m, expected):
    assert random_spans_helper(512, d, m) == expected


def test_half_density_hack():
    from c4forge.objectives.lengths import _lengths_of

    # the scan stops at 767 (inputs 512) whose targets (513) exceed 512: T5 subtracts 1 from both
    assert _lengths_of(767, 0.5, 3.0)[:2] == (512, 513)
    assert random_spans_helper(512, 0.5, 3.0) == (766, 512)
    for inputs_length in (64, 100, 128, 777):
        assert random_spans_helper(inputs_length, 0.5, 3.0)[1] <= inputs_length


def test_too_many_sentinels_is_refused_up_front():
    with pytest.raises(ConfigError, match="114 noise spans.*100 sentinels.*1809"):
        span_corruption_lengths(2048)
    assert span_corruption_lengths(1809)[0] > 0
    with pytest.raises(ConfigError):
        span_corruption_lengths(1810)
    assert max_inputs_length(0.15, 3.0) == 1809
    with pytest.raises(ConfigError, match="sentinels"):
        make_config("span_corruption", inputs_length=2048)


@pytest.mark.parametrize(
    "inputs_length", [8, 9, 13, 64, 100, 172, 316, 352, 511, 512, 604, 1000, 1809]
)
def test_lengths_agree_with_corruption_output(inputs_length):
    tokens_length, targets_length = random_spans_helper(inputs_length)
    for seed in range(3):
        inputs, targets = span_corruption(
            np.arange(3, 3 + tokens_length), np.random.default_rng(seed), vocab_size=V
        )
        assert len(inputs) == inputs_length  # full pieces need no padding
        assert len(targets) == targets_length
    longer = span_corruption(
        np.arange(3, 4 + tokens_length), np.random.default_rng(0), vocab_size=V, extra_ids=1000
    )[0]
    assert len(longer) > inputs_length  # tokens_length is the largest that fits


# --- §4 other objectives --------------------------------------------------------------------------

tokens_st = st.lists(st.integers(3, V - 101), min_size=1, max_size=600).map(
    lambda x: np.array(x, np.int32)
)


@settings(max_examples=80, deadline=None)
@given(tokens=tokens_st, seed=st.integers(0, 2**32 - 1))
def test_prefix_lm(tokens, seed):
    inputs, targets = prefix_lm(tokens, np.random.default_rng(seed))
    assert inputs[-1] == EOS and targets[-1] == EOS
    assert np.array_equal(np.concatenate([inputs[:-1], targets[:-1]]), tokens)
    k = len(inputs) - 1
    if len(tokens) == 1:
        assert inputs.tolist() == [EOS] and targets.tolist() == [tokens[0], EOS]
    else:
        assert 1 <= k <= len(tokens) - 1


def test_prefix_lm_split_point_is_uniform():
    ks = [len(prefix_lm(np.arange(3, 9), np.random.default_rng(s))[0]) - 1 for s in range(5000)]
    counts = np.bincount(ks, minlength=6)[1:6]
    assert counts.min() > 850 and counts.max() < 1150  # uniform on {1..5}: 1000 each


@settings(max_examples=60, deadline=None)
@given(tokens=tokens_st, seed=st.integers(0, 2**32 - 1))
def test_bert_t5_and_mass(tokens, seed):
    for fn in (bert_t5, mass):
        inputs, targets = fn(tokens, np.random.default_rng(seed), vocab_size=V)
        assert np.array_equal(targets[:-1], tokens) and targets[-1] == EOS
        assert len(inputs) == len(tokens) + 1 and inputs[-1] == EOS
        changed = inputs[:-1] != tokens
        assert np.all((inputs[:-1][changed] == V - 1) | (fn is bert_t5))
        assert np.all(inputs[:-1] >= 3)


def test_bert_t5_rates():
    tokens = np.full(200_000, 7, dtype=np.int32)
    inputs, _ = bert_t5(tokens, np.random.default_rng(0), vocab_size=V)
    noisy = inputs[:-1] != 7
    assert abs(noisy.mean() - 0.15) < 0.005  # (a random id equal to 7 is negligible)
    is_mask = inputs[:-1] == V - 1
    assert abs(is_mask.sum() / noisy.sum() - 0.9) < 0.01
    rand = inputs[:-1][noisy & ~is_mask]
    assert (
        rand.min() >= 3 and rand.max() < V and (rand >= V - 100).any()
    )  # range includes sentinels


def _plain_groups(x: np.ndarray) -> list[list[int]]:
    groups: list[list[int]] = [[]]
    for t in x[:-1].tolist():
        if t >= V - 100:
            groups.append([])
        else:
            groups[-1].append(t)
    return [g for g in groups if g]


@settings(max_examples=80, deadline=None)
@given(tokens=tokens_st, seed=st.integers(0, 2**32 - 1))
def test_iid_replace_spans_reconstructs(tokens, seed):
    inputs, targets = iid_replace_spans(tokens, np.random.default_rng(seed), vocab_size=V)
    kept, noise = _plain_groups(inputs), _plain_groups(targets)
    assert int(is_sentinel(inputs).sum()) == len(noise)  # one sentinel per noise run
    assert int(is_sentinel(targets).sum()) == len(kept)  # one sentinel per kept run
    first, second = (noise, kept) if is_sentinel(inputs[:1])[0] else (kept, noise)
    out: list[int] = []
    for i in range(max(len(first), len(second))):
        out += (first[i] if i < len(first) else []) + (second[i] if i < len(second) else [])
    assert out == tokens.tolist()
    # sentinel ids count down from V-1 on both sides
    assert inputs[is_sentinel(inputs)].tolist() == list(range(V - 1, V - 1 - len(noise), -1))


def test_iid_replace_spans_too_many_spans():
    with pytest.raises(tf.TooManySpans):
        iid_replace_spans(np.arange(3, 5003), np.random.default_rng(0), vocab_size=V)


@settings(max_examples=60, deadline=None)
@given(tokens=tokens_st, seed=st.integers(0, 2**32 - 1))
def test_iid_drop_and_deshuffle(tokens, seed):
    inputs, targets = iid_drop(tokens, np.random.default_rng(seed))
    assert len(inputs) + len(targets) == len(tokens) + 2
    mask = nz.iid_noise_mask(len(tokens), np.random.default_rng(seed))
    assert np.array_equal(inputs[:-1], tokens[~mask]) and np.array_equal(targets[:-1], tokens[mask])
    inputs, targets = deshuffle(tokens, np.random.default_rng(seed))
    assert np.array_equal(np.sort(inputs[:-1]), np.sort(tokens)) and np.array_equal(
        targets[:-1], tokens
    )


# --- registry -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,lengths,piece,concat",
    [
        ("span_corruption", (512, 114), 568, True),
        ("prefix_lm", (512, 512), 511, False),
        ("bert_t5", (512, 512), 511, True),
        ("mass", (512, 512), 511, True),
        ("iid_replace_spans", (512, 192), 511, True),
        ("iid_drop", (512, 104), 511, True),
        ("deshuffle", (512, 512), 511, False),
        ("bert_mlm_nsp", (128, 20), 128, False),
    ],
)
def test_registry_defaults(name, lengths, piece, concat):
    cfg = make_config(name)
    assert (cfg.inputs_length, cfg.targets_length) == lengths
    assert cfg.tokens_length == piece
    assert cfg.concatenates == concat and OBJECTIVES[name].concat == concat
    assert set(cfg.columns) == set(OBJECTIVES[name].columns) or cfg.packing == "per_document"
    assert cfg.descriptor()["name"] == name
    assert OBJECTIVES[name].default_lengths(lengths[0]) == lengths


def test_registry_refusals():
    with pytest.raises(ConfigError, match="unknown objective"):
        make_config("gpt")
    with pytest.raises(ConfigError, match="0.5"):
        make_config("prefix_lm", noise_density=0.6)
    with pytest.raises(ConfigError, match="1.0"):
        make_config("deshuffle", noise_density=0.5)
    with pytest.raises(ConfigError, match="regular"):
        make_config("mass", mask="regular")
    with pytest.raises(ConfigError, match="extra ids"):
        make_config("span_corruption", extra_ids=0)
    with pytest.raises(ConfigError, match="packing"):
        make_config(packing="first_fit")
    cfg = make_config(packing="per_document", inputs_length=128)
    assert cfg.columns[2:] == (
        "inputs_segment_ids",
        "inputs_positions",
        "targets_segment_ids",
        "targets_positions",
    )
    assert cfg.concat_documents is None and cfg.pack_window == 512
    assert make_config(inputs_length=1024).tokens_length == 1137


def test_a_registered_objective_is_an_ordinary_entry(monkeypatch):
    """Registering an entry is all it takes: CLI choice and flag, validation of its own
    option, the index.json descriptor, counters and examples (no name is special-cased)."""
    import dataclasses

    from c4forge.cli import build_parser
    from c4forge.objectives import registry as R
    from c4forge.objectives.examples import shard_examples

    def configure_toy(spec, *, toy_level, **common):
        if toy_level < 0:
            raise ConfigError(f"--toy-level must be >= 0, got {toy_level}")
        cfg = R.configure_pieces(spec, **common)
        return dataclasses.replace(cfg, options=(("toy_level", toy_level),))

    toy = dataclasses.replace(
        R.OBJECTIVES["prefix_lm"],
        name="toy_prefix",
        objective_id=99,
        reference="a test entry",
        configure=configure_toy,
        options=(R.ObjectiveOption("toy_level", int, 3, "a toy option"),),
    )
    monkeypatch.setitem(R.OBJECTIVES, "toy_prefix", toy)
    argv = ["shards", "docs", "--vocab", "v", "-o", "o", "--objective", "toy_prefix"]
    args, _ = build_parser().parse_known_args([*argv, "--toy-level", "5"])
    assert args.objective == "toy_prefix" and args.toy_level == 5
    cfg = make_config("toy_prefix", inputs_length=64)
    assert cfg.option("toy_level") == 3 and cfg.descriptor()["toy_level"] == 3
    assert cfg.descriptor()["name"] == "toy_prefix" and cfg.spec is toy
    with pytest.raises(ConfigError, match="--toy-level must be >= 0"):
        make_config("toy_prefix", toy_level=-1)
    with pytest.raises(ConfigError, match="--toy-level: only for --objective toy_prefix"):
        make_config("span_corruption", toy_level=2)
    with pytest.raises(ConfigError, match="no option gizmo"):
        make_config("span_corruption", gizmo=1)
    docs = [np.arange(3, 300, dtype=np.int32), np.arange(5, 90, dtype=np.int32)]
    stats = toy.new_stats()
    examples = list(
        shard_examples(docs, clean_shard_index=0, seed=0, config=cfg, vocab_size=V, stats=stats)
    )
    assert len(examples) == stats["examples"] == stats["pieces"] == 7  # ceil(297/63) + ceil(85/63)


def test_ragged_batch_equals_one_by_one():

    rng = np.random.default_rng(11)
    lengths = [2, 3, 29, 30, 31, 568, 1200, *rng.integers(2, 900, 120).tolist()]
    pieces = [rng.integers(3, 30000, n).astype(np.int32) for n in lengths]
    for extra_ids in (100, 20):  # with 20, long pieces need too many sentinels → None
        got = span_corruption_ragged(
            pieces,
            (piece_rng(1, 0, 0, i, 7) for i in range(len(pieces))),
            vocab_size=V,
            extra_ids=extra_ids,
        )
        for i, piece in enumerate(pieces):
            try:
                want = span_corruption(
                    piece, piece_rng(1, 0, 0, i, 7), vocab_size=V, extra_ids=extra_ids
                )
            except tf.TooManySpans:
                assert got[i] is None
                continue
            assert np.array_equal(got[i][0], want[0]) and np.array_equal(got[i][1], want[1])
            assert np.array_equal(reconstruct(*got[i]), piece)
    assert any(g is None for g in got)


def _smallest_reference(values: list[float], count: int) -> set[int]:
    """The definition: the `count` smallest draws, ties to the lower index (a stable sort)."""
    return set(sorted(range(len(values)), key=lambda j: (values[j], j))[:count])


def test_smallest_draw_selection_matches_a_stable_sort():
    from c4forge.objectives.functions import smallest_per_segment

    rng = np.random.default_rng(3)
    seg_len = np.array([0, 1, 5, 84, 482, 40, 3, 100, 7], dtype=np.int64)
    count = np.array([0, 1, 2, 27, 27, 40, 0, 5, 3], dtype=np.int64)
    cases = {
        "uniform": rng.random(int(seg_len.sum())),
        # many exact ties (values on a coarse grid): exercises the stable tie-breaking path
        "ties": rng.integers(0, 6, int(seg_len.sum())) / 8,
        # every draw above the candidate bound: exercises the per-segment fallback
        "no candidates": 0.9 + rng.random(int(seg_len.sum())) * 0.09,
    }
    for name, u in cases.items():
        got = smallest_per_segment(u, seg_len, count)
        at = 0
        for n, c in zip(seg_len.tolist(), count.tolist()):
            want = _smallest_reference(u[at : at + n].tolist(), c)
            assert set(np.flatnonzero(got[at : at + n]).tolist()) == want, name
            at += n
    u2 = rng.integers(0, 4, (50, 30)) / 4  # heavy ties, 2-D rows (the equal-length batch path)
    for count2 in (1, 7, 29):
        gaps = nz.smallest_gaps(u2, count2)
        for row, g in zip(u2, gaps):
            assert set(g.tolist()) == _smallest_reference(row.tolist(), count2)
            assert list(g) == sorted(g)


def test_span_runs_follow_the_definition_draw_for_draw():
    """§3.1 from scratch: the noise split cuts at the s−1 smallest of the first n−1 draws, the
    kept split at the s−1 smallest of the next k−1; batch and ragged paths agree with it."""

    for length in (2, 7, 31, 200, 568, 900):
        n, s, k = nz.span_shape(length, 0.15, 3.0)
        for seed in range(3):
            u = np.random.Generator(np.random.Philox(key=piece_key128(seed, 0, 0, 0, length)))
            u = u.random(n - 1 + k - 1).tolist()

            def runs(draws: list[float], total: int, s: int = s) -> list[int]:
                cuts = sorted(j + 1 for j in _smallest_reference(draws, s - 1))
                bounds = [0, *cuts, total]
                return [b - a for a, b in zip(bounds, bounds[1:])]

            keep, noise = nz.span_runs(length, piece_rng(seed, 0, 0, 0, length))
            assert noise.tolist() == runs(u[: n - 1], n) and keep.tolist() == runs(u[n - 1 :], k)
            tokens = np.arange(3, 3 + length, dtype=np.int32)
            mask = np.repeat(np.tile([False, True], s), np.ravel(np.c_[keep, noise]))
            ins, tgs = span_corruption(tokens, piece_rng(seed, 0, 0, 0, length), vocab_size=V)
            assert np.array_equal(ins[:-1][ins[:-1] < V - 100], tokens[~mask])
            assert np.array_equal(tgs[:-1][tgs[:-1] < V - 100], tokens[mask])
            (rag,) = span_corruption_ragged(
                [tokens], [piece_rng(seed, 0, 0, 0, length)], vocab_size=V
            )
            assert np.array_equal(rag[0], ins) and np.array_equal(rag[1], tgs)


def test_numba_kernel_equals_the_numpy_code():
    """The kernel `span_corruption_batch` runs equals its numpy reference, draw for draw:
    uniform draws, exact ties (lower index first) and draws that leave the candidate bound
    short (every draw then a candidate)."""
    from c4forge.objectives._span_kernel import span_corrupt_rows
    from c4forge.objectives.functions import span_corruption_from_uniforms

    rng = np.random.default_rng(7)
    for length in (2, 3, 5, 20, 100, 568, 1000):
        for d, m in ((0.15, 3.0), (0.5, 1.0), (0.15, 10.0), (0.3, 2.0)):
            n, s, k = nz.span_shape(length, d, m)
            pieces = rng.integers(3, 30000, (5, length)).astype(np.int32)
            shape = (5, n - 1 + k - 1)
            for u in (
                rng.random(shape),
                rng.integers(0, 6, shape) / 8,
                0.9 + rng.random(shape) / 20,
            ):
                want = span_corruption_from_uniforms(pieces, u, V, d, m, 1)
                got = span_corrupt_rows(pieces, u, n, k, s, V, 1)
                for a, b in zip(want, got):
                    assert a.dtype == b.dtype and np.array_equal(a, b), (length, d, m)


def test_batch_switches_to_the_kernel_with_the_same_output(monkeypatch):
    """Past ``KERNEL_AFTER_PIECES`` a process corrupts through the numba kernel: same rows."""
    from c4forge.objectives import functions as fn

    pieces = np.random.default_rng(1).integers(3, 30000, (9, 568)).astype(np.int32)

    def batch() -> tuple[np.ndarray, np.ndarray]:
        return span_corruption_batch(
            pieces, (piece_rng(2, 0, 1, 4, p) for p in range(9)), vocab_size=V
        )

    monkeypatch.setattr(fn, "_KERNEL", {"pieces": 0})
    monkeypatch.setattr(fn, "KERNEL_AFTER_PIECES", 10)
    numpy_rows = batch()  # 9 pieces: still numpy
    assert "fn" not in fn._KERNEL
    kernel_rows = batch()  # 18: the kernel
    assert fn._KERNEL["fn"] is not None
    for a, b in zip(numpy_rows, kernel_rows):
        assert a.dtype == b.dtype and np.array_equal(a, b)
