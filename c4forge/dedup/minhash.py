"""Near-duplicate removal with MinHash-LSH, as pure functions over pages, buckets and edges.

Why this shape: every step is either per page, per LSH bucket, per edge pair or per graph node,
so Beam and Spark run the same functions as shuffles (GroupByKey) and no worker ever holds more
than one key's values. Steps (``--near-dedup minhash``, after the exact dedup of §8):

1. ``band_entries``: per page, a datasketch MinHash over word n-grams, cut into ``b`` bands of
   ``r`` rows (``b, r`` = datasketch ``MinHashLSH``'s own ``_optimal_param`` for the threshold).
2. ``bucket_pairs``: per band bucket, a star of candidate pairs to the bucket's smallest node,
   each verified by the signatures' estimated Jaccard (``>= threshold``).
3. ``pair_edge``: per distinct pair (the same pair can share several bands), count
   ``candidates``/``true_pairs`` once and keep the verified ones as graph edges.
4. Connected components by large-star / small-star (Kiveris et al., "Connected Components in
   MapReduce and Beyond", SoCC 2014), each round two shuffles, bounded rounds. At convergence
   every component is a star around its smallest node.
5. The survivor of a component is its smallest node; a node is ``md5(url)`` hex, so the
   survivor is the page with the smallest md5 of its URL. Every other node is ``removed``.

The whole stage is this module: the pure functions above, the plan's per-element steps
(``emit_bands`` → the graph in ``NearDedupStage.decide`` → ``mark_removed``) and ``stage(job)``,
which ``c4forge.clean.plan.build_plan`` lists.

Counters (stage ``near_dedup``): ``candidates``, ``true_pairs`` (info), ``removed``, ``passed``
(pages in = removed + passed), ``unconverged`` (info: components not finished within the round
bound; 0 on every graph we have seen, see ``MAX_ROUNDS``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.documents import Doc
from c4forge.corpus.drop_samples import sample
from c4forge.corpus.stages import StageJob
from c4forge.errors import ConfigError

STAGE = "near_dedup"
REASONS = ("candidates", "true_pairs", "removed", "passed", "unconverged")
FLOW = Flow(
    ("removed",),
    ("passed",),
    ("candidates", "true_pairs", "unconverged"),
    title="near-dedup (MinHash)",
    detail="pairs",
)
SEED = 1  # datasketch.MinHash(seed=1), the library default; fixed so signatures are reproducible
# Large-star/small-star needs O(log^2 n) rounds in theory and a handful in practice; the bound
# keeps a pathological graph from looping forever (unfinished nodes are counted `unconverged`).
MAX_ROUNDS = 16


@dataclass(frozen=True)
class MinHashParams:
    ngram: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    bands: int = 0  # derived by ``make_params``
    rows: int = 0

    def fingerprint(self) -> dict:
        return {
            "ngram": self.ngram,
            "num_perm": self.num_perm,
            "threshold": self.threshold,
            "bands": self.bands,
            "rows": self.rows,
            "seed": SEED,
            "datasketch": importlib.metadata.version("datasketch"),
        }


def make_params(ngram: int = 5, num_perm: int = 128, threshold: float = 0.8) -> MinHashParams:
    """Validate the options and derive bands/rows exactly as ``datasketch.MinHashLSH`` does."""
    from datasketch.lsh import _optimal_param

    if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 1:
        raise ConfigError(f"--ngram must be an integer >= 1, got {ngram!r}")
    if isinstance(num_perm, bool) or not isinstance(num_perm, int) or num_perm < 2:
        raise ConfigError(f"--num-perm must be an integer >= 2, got {num_perm!r}")
    if not isinstance(threshold, (int, float)) or not (0.0 < threshold <= 1.0):
        raise ConfigError(f"--threshold must be in (0, 1], got {threshold!r}")
    # MinHashLSH(threshold, num_perm) with its default weights (0.5, 0.5).
    bands, rows = _optimal_param(threshold, num_perm, 0.5, 0.5)
    if bands < 1 or rows < 1 or bands * rows > num_perm:
        raise ConfigError(
            f"--num-perm {num_perm} is too small for --threshold {threshold} "
            f"(bands={bands}, rows={rows})"
        )
    return MinHashParams(ngram, num_perm, float(threshold), bands, rows)


def node_id(url: str) -> str:
    """A page's graph node: md5 hex of its URL, so ``min`` over a component is the survivor."""
    return hashlib.md5(url.encode("utf-8")).hexdigest()


def shingles(text: str, ngram: int) -> set[bytes]:
    """Lowercased whitespace-word n-grams (UTF-8). A page shorter than ``ngram`` words is one
    shingle of all its words, so short pages still get a signature (datatrove does the same)."""
    words = text.lower().split()
    if not words:
        return set()
    if len(words) <= ngram:
        return {" ".join(words).encode("utf-8")}
    return {" ".join(words[i : i + ngram]).encode("utf-8") for i in range(len(words) - ngram + 1)}


@functools.lru_cache(maxsize=8)
def _minhash_kwargs(num_perm: int) -> dict:
    """datasketch draws its permutations from ``RandomState(seed)``; drawing them once per
    process (and passing them in, with their scheme on datasketch >= 2) gives the same
    signatures without the per-page cost."""
    from datasketch import MinHash

    m = MinHash(num_perm=num_perm, seed=SEED)
    kwargs = {"num_perm": num_perm, "seed": SEED, "permutations": m.permutations}
    if hasattr(m, "scheme"):  # datasketch 2.x: affine32 by default; 1.x has no scheme
        kwargs["scheme"] = m.scheme
    return kwargs


def signature(text: str, params: MinHashParams) -> np.ndarray | None:
    """``MinHash(num_perm, seed=1)`` hash values over the page's shingles (``None``: no words).

    The values depend on datasketch's hashing scheme (2.x: affine32, 1.x: legacy), so the
    version is part of ``MinHashParams.fingerprint``."""
    from datasketch import MinHash

    grams = shingles(text, params.ngram)
    if not grams:
        return None
    m = MinHash(**_minhash_kwargs(params.num_perm))
    m.update_batch(sorted(grams))
    return m.hashvalues


def band_entries(
    node: str, sig: np.ndarray, params: MinHashParams
) -> Iterator[tuple[bytes, tuple[str, bytes]]]:
    """``(band key, (node, signature bytes))`` for each of the ``b`` bands.

    The key is the band index plus the band's hash values, like MinHashLSH's per-band tables.
    The full signature rides along so a bucket can verify its pairs without another join.
    """
    width = sig.dtype.itemsize  # 4 bytes per value with datasketch 2's affine32 scheme
    raw = sig.astype(sig.dtype.newbyteorder("<")).tobytes()
    for b in range(params.bands):
        lo, hi = b * params.rows * width, (b + 1) * params.rows * width
        yield b.to_bytes(2, "big") + raw[lo:hi], (node, raw)


def estimated_jaccard(a: bytes, b: bytes, num_perm: int) -> float:
    """Fraction of equal hash values (what ``MinHash.jaccard`` returns)."""
    x = np.frombuffer(a, dtype=np.uint8).reshape(num_perm, -1)
    y = np.frombuffer(b, dtype=np.uint8).reshape(num_perm, -1)
    return float(np.count_nonzero((x == y).all(axis=1))) / float(num_perm)


def bucket_pairs(
    members: Iterable[tuple[str, bytes]], params: MinHashParams
) -> Iterator[tuple[tuple[str, str], bool]]:
    """For one band bucket: ``((smallest node, other node), verified)`` per other member.

    A star to the smallest node keeps the bucket's connectivity with ``k - 1`` pairs instead of
    ``k(k-1)/2``; a member that is near another member but not near the smallest one can still
    be joined through a bucket of another band. Duplicate members (same node) collapse.
    """
    by_node: dict[str, bytes] = {}
    for node, sig in members:
        by_node.setdefault(node, sig)
    if len(by_node) < 2:
        return
    nodes = sorted(by_node)
    root = nodes[0]
    root_sig = by_node[root]
    for other in nodes[1:]:
        ok = estimated_jaccard(root_sig, by_node[other], params.num_perm) >= params.threshold
        yield (root, other), ok


def pair_edge(
    pair: tuple[str, str], verified: Iterable[bool], count: Count
) -> Iterator[tuple[str, str]]:
    """For one distinct candidate pair (it may come from several bands): count it, and emit
    it as a graph edge when verified. All flags of a pair are equal (same two signatures)."""
    count(STAGE, "candidates")
    if any(verified):
        count(STAGE, "true_pairs")
        yield pair


# ------------------------------------------------------------------------------------------
# Connected components: large-star / small-star over an edge list.
# Edges are (u, v) with u != v; an engine groups them by node and calls the per-node function.


def large_star_input(edge: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """Large-star groups each node with all its neighbours: emit both directions."""
    u, v = edge
    yield u, v
    yield v, u


def large_star(node: str, neighbours: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Connect every larger neighbour to the smallest node of the closed neighbourhood."""
    nbrs = set(neighbours)
    m = min(nbrs | {node})
    for v in nbrs:
        if v > node:
            yield v, m


def small_star_input(edge: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """Small-star groups each node with its smaller neighbours: key by the larger end."""
    u, v = edge
    yield (u, v) if u > v else (v, u)


def small_star(node: str, smaller: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Connect the node and its smaller neighbours to the smallest of them."""
    nbrs = set(smaller)
    m = min(nbrs | {node})
    for v in nbrs | {node}:
        if v != m:
            yield v, m


def canonical(edge: tuple[str, str]) -> tuple[str, str] | None:
    """``(larger, smaller)``; ``None`` for a self-loop. Both star steps emit ``(v, m)``."""
    u, v = edge
    if u == v:
        return None
    return (u, v) if u > v else (v, u)


def is_star_node(node: str, neighbours: Iterable[str]) -> bool:
    """At convergence a node is a leaf with one smaller neighbour, or a centre whose
    neighbours are all larger. Anything else means the round bound was hit."""
    nbrs = set(neighbours)
    smaller = [v for v in nbrs if v < node]
    return not smaller or (len(nbrs) == 1)


def removed_node(edge: tuple[str, str]) -> str:
    """A converged edge is (leaf, centre) with centre = component minimum: the leaf goes."""
    leaf, _centre = edge
    return leaf


# ------------------------------------------------------------------------------------------
# The plan's stage, keys only: ``emit`` per document in its chunk pass, ``decide`` through the
# engine primitives (``c4forge.engines.base``), ``apply`` in the next chunk pass. A graph node
# is ``md5hex(url):chunk:record``: md5 first (fixed width), so string order and the component
# minimum (the survivor) are md5(url)'s; the suffix routes a decision back to its chunk.


def node_of(loc: tuple, doc: Doc) -> str:
    return f"{node_id(doc.url)}:{loc[0]}:{loc[1]}"


def loc_of_node(node: str) -> tuple[int, int]:
    _, chunk, record = node.rsplit(":", 2)
    return int(chunk), int(record)


def emit_bands(loc: tuple, doc: Doc, count: Count, *, params: MinHashParams) -> Iterator[tuple]:
    sig = signature(doc.text, params)
    if sig is not None:
        yield from band_entries(node_of(loc, doc), sig, params)


def _bucket_pairs(key: Any, members: Iterable[tuple], count: Count, *, params: Any) -> Iterator:
    yield from bucket_pairs(members, params)


def _either(flags: Iterable[bool]) -> bool:
    """One entry per distinct pair: true when any bucket verified it."""
    return any(flags)


def _pair_edge(item: tuple, count: Count) -> Iterator[tuple[str, str]]:
    pair, ok = item
    yield from pair_edge(pair, [ok], count)


def _canonical_edge(edge: tuple[str, str], count: Count) -> Iterator[tuple[str, str]]:
    e = canonical(edge)
    if e is not None:
        yield e


def _large_star_input(edge: tuple[str, str], count: Count) -> Iterator[tuple[str, str]]:
    yield from large_star_input(edge)


def _small_star_input(edge: tuple[str, str], count: Count) -> Iterator[tuple[str, str]]:
    yield from small_star_input(edge)


def _large_star(node: str, nbrs: Iterable[str], count: Count) -> Iterator[tuple[str, str]]:
    yield from large_star(node, nbrs)


def _small_star(node: str, nbrs: Iterable[str], count: Count) -> Iterator[tuple[str, str]]:
    yield from small_star(node, nbrs)


def _count_unconverged(node: str, nbrs: Iterable[str], count: Count) -> Iterator[Any]:
    if not is_star_node(node, nbrs):
        count(STAGE, "unconverged")
    return iter(())


def _removed_node(edge: tuple[str, str], count: Count) -> Iterator[str]:
    yield removed_node(edge)


def _removed_loc(node: str, count: Count) -> Iterator[tuple[tuple[int, int], bool]]:
    yield loc_of_node(node), True


def mark_removed(loc: tuple, doc: Doc, removed: Iterable[bool], count: Count) -> Iterator[Doc]:
    if any(True for _ in removed):
        count(STAGE, "removed")
        sample(count, STAGE, "removed", doc.text, doc.url)
    else:
        count(STAGE, "passed")
        yield doc


def _star_step(engine: Any, edges: Any, label: str, prep: Any, star: Any) -> Any:
    grouped = engine.group(engine.flat_map(edges, f"{label}/emit", prep), label, star)
    return engine.flat_map(grouped, f"{label}/canonical", _canonical_edge)


def _star_round(engine: Any, edges: Any, label: str) -> Any:
    """One large-star + small-star round; on a converged edge set it changes nothing."""
    large = _star_step(engine, edges, f"{label}/large", _large_star_input, _large_star)
    small = _star_step(engine, large, f"{label}/small", _small_star_input, _small_star)
    return engine.distinct(small, f"{label}/distinct")


@dataclass(frozen=True)
class NearDedupStage:
    """MinHash-LSH as a corpus stage: LSH buckets → verified pairs → connected components by
    large-star/small-star rounds in a bounded loop (every engine: until the edge set stops
    changing, at most ``max_rounds``; nodes not yet in a star are counted ``unconverged``) →
    one survivor per component (smallest md5(url))."""

    name: str
    params: Any
    max_rounds: int
    shuffle_key: str = "LSH band, then graph node"
    flow: Flow | None = None
    codec: None = None  # its decisions are ``(loc, decision)``, routed by the chunk passes
    keeps_documents: bool = False  # it drops documents
    emit_chunk: Any = None  # ``emit`` per document

    @property
    def emit(self) -> Any:
        return functools.partial(emit_bands, params=self.params)

    apply = staticmethod(mark_removed)

    def decide(self, engine: Any, bands: Any) -> Any:
        n = self.name
        pairs = engine.group(
            bands, f"{n}/pairs", functools.partial(_bucket_pairs, params=self.params)
        )
        distinct_pairs = engine.combine(pairs, f"{n}/distinct_pairs", _either)
        edges = engine.flat_map(distinct_pairs, f"{n}/edges", _pair_edge)
        stars = self.components(engine, edges)
        removed = engine.distinct(
            engine.flat_map(stars, f"{n}/removed", _removed_node), f"{n}/removed/distinct"
        )
        return engine.flat_map(removed, f"{n}/removed/loc", _removed_loc)

    def components(self, engine: Any, edges: Any) -> Any:
        """Edges → star edges ``(leaf, component minimum)``: canonical distinct edges, then the
        bounded loop of star rounds; nodes not in a star after it are counted ``unconverged``."""
        n = self.name
        edges = engine.distinct(
            engine.flat_map(edges, f"{n}/canonical", _canonical_edge), f"{n}/distinct_edges"
        )
        stars = engine.loop(edges, f"{n}/round", _star_round, self.max_rounds)
        stars = engine.shared(stars)
        check = engine.flat_map(stars, f"{n}/check/emit", _large_star_input)
        engine.drain(engine.group(check, f"{n}/check", _count_unconverged), f"{n}/check/drain")
        return stars


def stage(job: StageJob) -> NearDedupStage | None:
    """``--near-dedup minhash``: after exact dedup, before decontamination and language ID."""
    if job.near_dedup != "minhash":
        return None
    return NearDedupStage(STAGE, job.minhash_params(), MAX_ROUNDS, flow=FLOW)
