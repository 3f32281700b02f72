"""The encoder-decoder objectives (objectives.md §3, §4): pure functions of (tokens, rng, …).

Each takes one token piece (int array, no EOS) and a numpy Generator and returns
`(inputs, targets)` as int32 arrays, each ending with EOS: T5's "mask → inputs_fn → targets_fn
→ EOS" frame. Trimming to the row lengths is the caller's job (`examples.py`), so these stay
exact and testable. Sentinels count down from `vocab_size − 1` (V, including the extra ids).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from c4forge.errors import ConfigError
from c4forge.objectives import noise as noise_masks
from c4forge.objectives import transforms
from c4forge.vocab.vocab import EOS_ID


def _as_tokens(tokens: np.ndarray | list[int]) -> np.ndarray:
    return np.asarray(tokens, dtype=np.int32)


def _drop_split(
    tokens: np.ndarray, noise: np.ndarray, eos_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs = the kept tokens, targets = the noise tokens, each + EOS (prefix LM and
    `iid_15_d_d` differ only in their mask)."""
    return (
        transforms.append_eos(transforms.drop_noise_tokens(tokens, noise), eos_id),
        transforms.append_eos(transforms.drop_nonnoise_tokens(tokens, noise), eos_id),
    )


def _sentinel_split(
    tokens: np.ndarray, noise: np.ndarray, vocab_size: int, extra_ids: int, eos_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs: each noise span → one unique sentinel; targets: each kept span → one (T5's
    `noise_span_to_unique_sentinel` / `nonnoise_span_to_unique_sentinel` pair), each + EOS."""
    inputs = transforms.noise_span_to_unique_sentinel(tokens, noise, vocab_size, extra_ids)
    targets = transforms.nonnoise_span_to_unique_sentinel(tokens, noise, vocab_size, extra_ids)
    return transforms.append_eos(inputs, eos_id), transforms.append_eos(targets, eos_id)


def span_noise_mask(
    length: int,
    rng: np.random.Generator,
    noise_density: float,
    mean_noise_span_length: float,
    mask: str = "random",
) -> np.ndarray:
    if mask == "random":
        return noise_masks.random_spans_noise_mask(
            length, rng, noise_density, mean_noise_span_length
        )
    if mask == "regular":
        return noise_masks.regular_noise_mask(length, rng, noise_density)
    raise ValueError(f"unknown mask {mask!r} (random, regular)")


def span_corruption(
    tokens: np.ndarray | list[int],
    rng: np.random.Generator,
    *,
    vocab_size: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    mask: str = "random",
    extra_ids: int = 100,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """T5's default objective (§3): unique sentinel per noise span / per kept span.

    The readable definition: the noise mask, then each noise span → one sentinel in the inputs
    and each kept span → one in the targets. The shard build runs the vectorised equivalent
    (``span_corruption_batch`` for a group's full pieces, ``span_corruption_ragged_flat`` for
    the rest), which consumes each piece's generator the same way; tests compare the two.
    """
    tokens = _as_tokens(tokens)
    noise = span_noise_mask(len(tokens), rng, noise_density, mean_noise_span_length, mask)
    return _sentinel_split(tokens, noise, vocab_size, extra_ids, eos_id)


def _interleave(
    plain: np.ndarray, before: np.ndarray, sentinels: np.ndarray, eos_id: int
) -> np.ndarray:
    """Rows of `plain` (P, a) with `sentinels[j]` inserted before column `before[:, j]`, then EOS."""
    rows, width = plain.shape[0], plain.shape[1] + len(sentinels) + 1
    out = np.empty((rows, width), dtype=np.int32)
    at = before + np.arange(len(sentinels))
    row_ix = np.arange(rows)[:, None]
    rest = np.ones((rows, width), dtype=bool)
    rest[row_ix, at] = False
    rest[:, -1] = False
    out[rest] = plain.ravel()
    out[row_ix, at] = sentinels
    out[:, -1] = eos_id
    return out


def span_corruption_batch(
    pieces: np.ndarray,
    rngs: Iterable[np.random.Generator],
    *,
    vocab_size: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    extra_ids: int = 100,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """Span corruption of P equal-length pieces (P, L ≥ 2) at once: row i draws its uniforms
    from the i-th generator exactly as `span_corruption` would, so row i equals
    `span_corruption(pieces[i], rng_i)`; everything after the draws is one vectorized pass."""
    rows, length = pieces.shape
    n, s, k = noise_masks.span_shape(length, noise_density, mean_noise_span_length)
    if s > extra_ids:
        raise transforms.TooManySpans(f"{s} spans need more than {extra_ids} sentinels")
    draws = n - 1 + k - 1
    u = np.empty((rows, draws))
    for i, rng in zip(range(rows), rngs):
        rng.random(out=u[i])
    kernel = _span_kernel(rows)
    if kernel is not None:
        tokens = np.ascontiguousarray(pieces, dtype=np.int32)
        return kernel(tokens, u, n, k, s, vocab_size, eos_id)
    return span_corruption_from_uniforms(
        pieces, u, vocab_size, noise_density, mean_noise_span_length, eos_id
    )


def span_corruption_from_uniforms(
    pieces: np.ndarray,
    u: np.ndarray,
    vocab_size: int,
    noise_density: float,
    mean_noise_span_length: float,
    eos_id: int,
) -> tuple[np.ndarray, np.ndarray]:
    """`span_corruption_batch` after the draws, in numpy (the reference of the numba kernel
    ``_span_kernel.span_corrupt_rows``, and the path where numba cannot load)."""
    rows, length = pieces.shape
    n, s, k = noise_masks.span_shape(length, noise_density, mean_noise_span_length)
    keep, noise = noise_masks.span_runs_from_uniforms(
        u, length, noise_density, mean_noise_span_length
    )
    runs = np.empty((rows, 2 * s), dtype=np.int64)
    runs[:, 0::2] = keep
    runs[:, 1::2] = noise
    pattern = np.tile(np.arange(2 * s) % 2 == 1, rows)
    is_noise = np.repeat(pattern, runs.ravel()).reshape(rows, length)
    sentinels = (vocab_size - 1 - np.arange(s)).astype(np.int32)
    # inputs: S_j right after kept run j; targets: S_j right before noise run j.
    inputs = _interleave(
        pieces[~is_noise].reshape(rows, k), np.cumsum(keep, axis=1), sentinels, eos_id
    )
    targets = _interleave(
        pieces[is_noise].reshape(rows, n), np.cumsum(noise, axis=1) - noise, sentinels, eos_id
    )
    return inputs, targets


# The numba kernel's start-up (numba, LLVM, the cached code) pays back only after many pieces
# (benchmarks/RESULTS.md §14.4): a process starts on numpy and loads the kernel once it has
# corrupted this many, so a small build pays nothing and a C4-sized clean shard gains.
KERNEL_AFTER_PIECES = 50_000
_KERNEL: dict[str, Any] = {"pieces": 0}  # pieces corrupted by this process; "fn" once loaded


def _span_kernel(pieces: int) -> Any:
    """The numba span-corruption kernel once this process has corrupted enough pieces, else
    None (the numpy path, also where numba cannot load)."""
    if "fn" in _KERNEL:
        return _KERNEL["fn"]
    _KERNEL["pieces"] += pieces
    if _KERNEL["pieces"] < KERNEL_AFTER_PIECES:
        return None
    try:
        from c4forge.objectives._span_kernel import span_corrupt_rows
    except Exception:  # noqa: BLE001 - no numba, or it cannot compile: the numpy path
        span_corrupt_rows = None
    _KERNEL["fn"] = span_corrupt_rows
    return span_corrupt_rows


RAGGED_MAX_PIECES = 512  # (segment id << 53) | 53-bit draw must fit int64: 2·512 segments


def _views(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Consecutive slices of `flat` (views; np.split is ~10x slower per piece)."""
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def span_corruption_ragged_flat(
    pieces: Sequence[np.ndarray],
    rngs: Iterable[np.random.Generator],
    *,
    vocab_size: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    extra_ids: int = 100,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Span corruption of up to 512 pieces of different lengths (each ≥ 2) in one vectorized
    pass: (indices of the pieces that fit the sentinels, their inputs concatenated, input
    lengths, targets concatenated, target lengths), or None when no piece fits. The shard job
    builds rows from these directly.

    Piece i consumes the same draws as `span_corruption(pieces[i], rng_i)` and gives the same
    example (the cut set is "the s−1 smallest draws" either way; here found for all pieces at
    once by `smallest_per_segment` instead of a per-piece argpartition).
    """
    if len(pieces) > RAGGED_MAX_PIECES:
        raise ValueError(f"at most {RAGGED_MAX_PIECES} pieces per call")
    lengths = np.fromiter((len(x) for x in pieces), dtype=np.int64, count=len(pieces))
    if len(lengths) == 0:
        return None
    if lengths.min() < 2:
        raise ValueError("ragged span corruption needs pieces of >= 2 tokens")
    # §3.1 shapes, vectorized with the scalar code's float64 half-even rounding.
    n_all = np.minimum(
        np.maximum(np.rint(lengths * noise_density).astype(np.int64), 1), lengths - 1
    )
    k_all = lengths - n_all
    s_all = np.maximum(1, np.rint(n_all / mean_noise_span_length).astype(np.int64))
    s_all = np.minimum(np.minimum(s_all, n_all), k_all)
    ok = s_all <= extra_ids
    draws = n_all + k_all - 2
    u_all = np.empty(int(draws.sum()))
    bounds = np.concatenate([[0], np.cumsum(draws)]).tolist()  # Python ints: a cheap loop
    for a, b, rng in zip(bounds[:-1], bounds[1:], rngs):
        rng.random(out=u_all[a:b])
    idx = np.flatnonzero(ok)
    if len(idx) == 0:
        return None
    n, k, s = n_all[idx], k_all[idx], s_all[idx]
    num = len(idx)
    u = u_all if len(idx) == len(pieces) else u_all[np.repeat(ok, draws)]
    # Segments 2p (noise split of piece p: n−1 draws) and 2p+1 (kept split: k−1 draws); the
    # s−1 smallest draws of each segment are its cut gaps (gap g → a run starts at g + 1).
    seg_len = np.stack([n - 1, k - 1], axis=1).ravel()
    is_cut = smallest_per_segment(u, seg_len, np.repeat(s - 1, 2))
    draw_is_noise = np.repeat(np.tile(np.array([True, False]), num), seg_len)
    n_off = np.cumsum(n) - n
    k_off = np.cumsum(k) - k
    # Run-start flags per element: each split's element 0 starts run 0; element j ≥ 1 starts a
    # run iff draw j − 1 of its segment is a cut (both sequences are in the same flat order).
    noise_flags = np.zeros(int(n.sum()), dtype=bool)
    keep_flags = np.zeros(int(k.sum()), dtype=bool)
    noise_flags[n_off] = True
    keep_flags[k_off] = True
    noise_flags[~noise_flags] = is_cut[draw_is_noise]
    keep_flags[~keep_flags] = is_cut[~draw_is_noise]
    noise_starts = np.flatnonzero(noise_flags)  # run R = (piece, j), in order
    keep_starts = np.flatnonzero(keep_flags)
    noise_len = np.diff(np.append(noise_starts, len(noise_flags)))
    keep_len = np.diff(np.append(keep_starts, len(keep_flags)))
    total_runs = len(noise_starts)
    runs = np.empty(2 * total_runs, dtype=np.int64)
    runs[0::2] = keep_len
    runs[1::2] = noise_len
    mask = np.repeat(np.tile(np.array([False, True]), total_runs), runs)
    flat = np.concatenate([pieces[i] for i in idx.tolist()]).astype(np.int32, copy=False)
    run_piece = np.repeat(np.arange(num), s)
    run_j = np.arange(total_runs) - np.repeat(np.cumsum(s) - s, s)
    sentinels = (vocab_size - 1 - run_j).astype(np.int32)
    r = np.arange(total_runs)
    in_lens, tg_lens = k + s + 1, n + s + 1
    inputs = _place_sentinels(
        flat[~mask], in_lens, keep_starts + keep_len + r + run_piece, sentinels, eos_id
    )
    targets = _place_sentinels(flat[mask], tg_lens, noise_starts + r + run_piece, sentinels, eos_id)
    return idx, inputs, in_lens, targets, tg_lens


def smallest_per_segment(u: np.ndarray, seg_len: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Flags marking, in each consecutive segment of `u`, its `count[i]` smallest draws.

    Ties go to the lower index, as in a stable sort. Why not one sort of all draws: only the
    `count`-th smallest value of each segment is needed. Draws below a generous per-segment
    bound (expected count + 6σ + 8) are the only candidates, about a fifth of them; one sort
    of the candidates' exact integer keys (segment << 53 | draw · 2^53) gives every segment's
    threshold, and a comparison marks the set. A segment with too few candidates (a ~1e-9
    event) is resolved by its own partition.
    """
    nseg = len(seg_len)
    if nseg > 1024:  # segment << 53 | 53-bit draw must fit a signed 64-bit key
        raise ValueError(f"at most 1024 segments per call, got {nseg}")
    ends = np.cumsum(seg_len)
    starts = ends - seg_len
    need = count > 0
    bound = np.where(
        need, np.minimum(1.0, (count + 6.0 * np.sqrt(count) + 8.0) / np.maximum(seg_len, 1)), -1
    )
    cand = np.flatnonzero(u < np.repeat(bound, seg_len))
    cseg = np.searchsorted(ends, cand, side="right")
    ccount = np.bincount(cseg, minlength=nseg)
    keys = (cseg.astype(np.int64) << 53) | (u[cand] * 2.0**53).astype(np.int64)
    keys.sort()
    thr = np.full(nseg, -1.0)
    good = need & (ccount >= count)
    at = (np.cumsum(ccount) - ccount)[good] + count[good] - 1
    thr[good] = (keys[at] & ((1 << 53) - 1)) * 2.0**-53  # exact: draws are multiples of 2^-53
    for i in np.flatnonzero(need & ~good).tolist():
        seg = u[starts[i] : ends[i]]
        thr[i] = np.partition(seg, count[i] - 1)[count[i] - 1]
    flags = u <= np.repeat(thr, seg_len)
    if np.count_nonzero(flags) == int(count.sum()):
        return flags
    # A tie at some threshold: rank every draw with a stable sort (lower index first).
    seg_id = np.repeat(np.arange(nseg, dtype=np.int64), seg_len)
    order = np.argsort((seg_id << 53) | (u * 2.0**53).astype(np.int64), kind="stable")
    rank = np.empty(len(u), dtype=np.int64)
    rank[order] = np.arange(len(u)) - np.repeat(starts, seg_len)
    return rank < np.repeat(count, seg_len)


def _place_sentinels(
    plain: np.ndarray, lengths: np.ndarray, at: np.ndarray, sentinels: np.ndarray, eos_id: int
) -> np.ndarray:
    """Flat outputs of `lengths` each: sentinels at `at`, EOS last, `plain` tokens elsewhere."""
    ends = np.cumsum(lengths)
    out = np.empty(int(ends[-1]), dtype=np.int32)
    rest = np.ones(len(out), dtype=bool)
    rest[at] = False
    rest[ends - 1] = False
    out[rest] = plain
    out[at] = sentinels
    out[ends - 1] = eos_id
    return out


def prefix_lm(
    tokens: np.ndarray | list[int],
    rng: np.random.Generator,
    *,
    vocab_size: int = 0,
    noise_density: float = 0.5,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs = a random prefix (k uniform on {1, …, L−1}), targets = the rest (§4).

    A 1-token piece has k = 0: inputs `[EOS]`, targets `[t, EOS]` (reference behaviour, kept).
    """
    tokens = _as_tokens(tokens)
    return _drop_split(
        tokens, noise_masks.random_prefix_noise_mask(len(tokens), rng, noise_density), eos_id
    )


def bert_t5(
    tokens: np.ndarray | list[int],
    rng: np.random.Generator,
    *,
    vocab_size: int,
    noise_density: float = 0.15,
    random_token_prob: float = 0.1,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """T5's BERT-style variant (`iid_15_r10s90_f`): i.i.d. noise → 10 % random id, 90 % V−1."""
    tokens = _as_tokens(tokens)
    noise = noise_masks.iid_noise_mask(len(tokens), rng, noise_density)
    inputs = transforms.noise_token_to_random_token_or_sentinel(
        tokens, noise, vocab_size, rng, random_token_prob
    )
    return transforms.append_eos(inputs, eos_id), transforms.append_eos(tokens, eos_id)


def mass(
    tokens: np.ndarray | list[int],
    rng: np.random.Generator,
    *,
    vocab_size: int,
    noise_density: float = 0.15,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """MASS-style (`iid_15_m_f`): each i.i.d. noise token → V−1; targets = the full piece."""
    tokens = _as_tokens(tokens)
    noise = noise_masks.iid_noise_mask(len(tokens), rng, noise_density)
    return (
        transforms.append_eos(
            transforms.noise_token_to_sentinel(tokens, noise, vocab_size), eos_id
        ),
        transforms.append_eos(tokens, eos_id),
    )


def iid_replace_spans(
    tokens: np.ndarray | list[int],
    rng: np.random.Generator,
    *,
    vocab_size: int,
    noise_density: float = 0.15,
    extra_ids: int = 100,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """`iid_15_u_u`: i.i.d. mask, unique sentinel per noise run (inputs) and per kept run (targets).

    No "starts with non-noise" guarantee: targets may begin with raw tokens, and may hold one
    more sentinel than inputs (reference behaviour). Raises TooManySpans past `extra_ids`.
    """
    tokens = _as_tokens(tokens)
    noise = noise_masks.iid_noise_mask(len(tokens), rng, noise_density)
    return _sentinel_split(tokens, noise, vocab_size, extra_ids, eos_id)


def iid_drop(
    tokens: np.ndarray | list[int],
    rng: np.random.Generator,
    *,
    vocab_size: int = 0,
    noise_density: float = 0.15,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """`iid_15_d_d`: noise tokens deleted from inputs; targets = the noise tokens only."""
    tokens = _as_tokens(tokens)
    return _drop_split(tokens, noise_masks.iid_noise_mask(len(tokens), rng, noise_density), eos_id)


def deshuffle(
    tokens: np.ndarray | list[int],
    rng: np.random.Generator,
    *,
    vocab_size: int = 0,
    eos_id: int = EOS_ID,
) -> tuple[np.ndarray, np.ndarray]:
    """`all_permute`: inputs = a uniform random permutation of the piece, targets = the piece."""
    tokens = _as_tokens(tokens)
    return transforms.append_eos(rng.permutation(tokens), eos_id), transforms.append_eos(
        tokens, eos_id
    )


# ----------------------------------------------------------------------------- parameters
# The parameters a piece objective may take besides the piece and its generator (the builder
# passes all but random_token_prob, bert_t5's fixed 10 % from T5's gin). Each
# function declares the ones it uses, and nothing else (no ``**kwargs`` catch-all): as seqio
# does with its preprocessors, the caller passes each function only what its signature names,
# so a misspelt parameter is an error instead of being silently ignored.
PIECE_PARAMETERS: tuple[str, ...] = (
    "vocab_size",
    "noise_density",
    "mean_noise_span_length",
    "mask",
    "extra_ids",
    "eos_id",
    "random_token_prob",
)


def parameters(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The keyword parameters of an objective function (those after ``tokens, rng``)."""
    return tuple(inspect.signature(fn).parameters)[2:]


def check_signature(name: str, fn: Callable[..., Any]) -> tuple[str, ...]:
    """``fn``'s parameters, each one the builder can pass; else a TypeError naming them."""
    sig = inspect.signature(fn).parameters
    if any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in sig.values()):
        raise TypeError(f"objective {name}: {fn.__name__} must name its parameters (no *args/**kw)")
    unknown = [p for p in parameters(fn) if p not in PIECE_PARAMETERS]
    if unknown:
        raise TypeError(
            f"objective {name}: {fn.__name__} takes {', '.join(unknown)}, which is no objective "
            f"parameter (valid: {', '.join(PIECE_PARAMETERS)})"
        )
    return parameters(fn)


def objective_kwargs(name: str, fn: Callable[..., Any], params: Mapping[str, Any]) -> dict:
    """Of ``params``, the ones ``fn``'s signature names. A name that is no objective parameter
    at all (a misspelling) is a ``ConfigError`` naming the objective and the valid names."""
    unknown = sorted(k for k in params if k not in PIECE_PARAMETERS)
    if unknown:
        raise ConfigError(
            f"objective {name} has no parameter {', '.join(unknown)} "
            f"(it takes {', '.join(parameters(fn))}; objectives take {', '.join(PIECE_PARAMETERS)})"
        )
    wanted = set(check_signature(name, fn))
    return {k: v for k, v in params.items() if k in wanted}
