"""Per-example random generators and row keys, derived from (seed, objective, shard, group, piece).

Why Philox: a counter-based generator whose whole state is a 128-bit key, so a fresh,
independent stream per example costs one hash plus a state assignment (a few µs), whereas
`default_rng([...])` runs SeedSequence hashing every time (tens of µs, per 568-token piece
comparable with the objective itself). The stream equals
`np.random.Generator(np.random.Philox(key=piece_key128(...)))`; a test checks that. One bit
generator is reused per thread (thread-local, so threaded Beam workers never share one).
"""

from __future__ import annotations

import hashlib
import struct
import threading

import numpy as np

_local = threading.local()
_ZERO4 = (0, 0, 0, 0)
_MASK64 = (1 << 64) - 1


_PIECE = struct.Struct("<5q")
_ROW = struct.Struct("<4q")
_KEY_WORDS = struct.Struct("<QQ")
_PERSON = b"c4forge.rng"


def piece_key128(
    seed: int, objective_id: int, clean_shard_index: int, group: int, piece: int
) -> int:
    """128-bit blake2b of the five seeding integers (all must be in [0, 2^63))."""
    data = _PIECE.pack(seed, objective_id, clean_shard_index, group, piece)
    return int.from_bytes(hashlib.blake2b(data, digest_size=16, person=_PERSON).digest(), "little")


def _generator() -> tuple[np.random.Philox, np.random.Generator, dict]:
    cached = getattr(_local, "philox", None)
    if cached is None:
        bitgen = np.random.Philox(key=0)
        # One state dict per thread, reused: only its "key" entry changes between examples.
        # Tuples of Python ints, not uint64 arrays: the setter reads them element by element,
        # and indexing a tuple costs a fraction of indexing an array (half of a piece's seeding).
        template = {
            "bit_generator": "Philox",
            "state": {"counter": _ZERO4, "key": None},
            "buffer": _ZERO4,
            "buffer_pos": 4,
            "has_uint32": 0,
            "uinteger": 0,
        }
        cached = (bitgen, np.random.Generator(bitgen), template)
        _local.philox = cached
    return cached


def _keyed(key_words: tuple[int, int]) -> np.random.Generator:
    bitgen, gen, template = _generator()
    template["state"]["key"] = key_words
    bitgen.state = template
    return gen


def keyed_rng(key128: int) -> np.random.Generator:
    """Generator(Philox(key=key128)) without re-constructing the bit generator each time."""
    return _keyed((key128 & _MASK64, key128 >> 64))


def piece_rng(
    seed: int, objective_id: int, clean_shard_index: int, group: int, piece: int
) -> np.random.Generator:
    """The generator of one example. Valid until the next call in the same thread.

    Same stream as ``keyed_rng(piece_key128(...))``: the digest's two little-endian 64-bit
    words are Philox's key words, unpacked straight from the bytes.
    """
    data = _PIECE.pack(seed, objective_id, clean_shard_index, group, piece)
    digest = hashlib.blake2b(data, digest_size=16, person=_PERSON).digest()
    return _keyed(_KEY_WORDS.unpack(digest))


def example_key(seed: int, clean_shard_index: int, group: int, piece: int) -> int:
    """Row key: unsigned 64-bit blake2b of (seed, clean shard index, group/document index, piece)."""
    data = _ROW.pack(seed, clean_shard_index, group, piece)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def example_keys(
    seed: int, clean_shard_index: int, groups: list[int], pieces: list[int]
) -> np.ndarray:
    """`example_key` of many examples as uint64 (the digests are the keys' little-endian bytes)."""
    pack = _ROW.pack
    digest = b"".join(
        hashlib.blake2b(pack(seed, clean_shard_index, g, p), digest_size=8).digest()
        for g, p in zip(groups, pieces)
    )
    return np.frombuffer(digest, dtype="<u8").astype(np.uint64)
