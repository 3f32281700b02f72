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
_ZERO4 = np.zeros(4, dtype=np.uint64)
_ZERO4.flags.writeable = False
_MASK64 = (1 << 64) - 1


def piece_key128(
    seed: int, objective_id: int, clean_shard_index: int, group: int, piece: int
) -> int:
    """128-bit blake2b of the five seeding integers (all must be in [0, 2^63))."""
    data = struct.pack("<5q", seed, objective_id, clean_shard_index, group, piece)
    return int.from_bytes(
        hashlib.blake2b(data, digest_size=16, person=b"c4forge.rng").digest(), "little"
    )


def keyed_rng(key128: int) -> np.random.Generator:
    """Generator(Philox(key=key128)) without re-constructing the bit generator each time."""
    cached = getattr(_local, "philox", None)
    if cached is None:
        bitgen = np.random.Philox(key=0)
        cached = (bitgen, np.random.Generator(bitgen))
        _local.philox = cached
    bitgen, gen = cached
    bitgen.state = {
        "bit_generator": "Philox",
        "state": {
            "counter": _ZERO4,  # the setter copies, so one read-only array serves every call
            "key": np.array([key128 & _MASK64, key128 >> 64], dtype=np.uint64),
        },
        "buffer": _ZERO4,
        "buffer_pos": 4,
        "has_uint32": 0,
        "uinteger": 0,
    }
    return gen


def piece_rng(
    seed: int, objective_id: int, clean_shard_index: int, group: int, piece: int
) -> np.random.Generator:
    """The generator of one example. Valid until the next call in the same thread."""
    return keyed_rng(piece_key128(seed, objective_id, clean_shard_index, group, piece))


def example_key(seed: int, clean_shard_index: int, group: int, piece: int) -> int:
    """Row key: unsigned 64-bit blake2b of (seed, clean shard index, group/document index, piece)."""
    data = struct.pack("<4q", seed, clean_shard_index, group, piece)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
