"""`Vocabulary`: a SentencePiece model plus T5's 100 sentinel ids appended at the top.

Sentinels are never tokenized from text by the data code; they are computed
(`sentinel(k) = V - 1 - k`, objectives.md §1.1). The `.extra_ids.model` (seqio's layout) exists
so that other tools see the same ids; we build it by appending pieces to the serialized
ModelProto at the protobuf wire level, because `sentencepiece_model_pb2` shipped with
sentencepiece 0.2.x refuses to import against older protobuf runtimes, and the wire format of
a repeated message field is stable and simple (a test checks the bytes against ModelProto).
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from c4forge.errors import ConfigError, InputError, VerificationError
from c4forge.io.storage import check_format, read_json
from c4forge.vocab.vocab_files import (
    DESCRIPTOR_FILE,
    EXTRA_IDS_MODEL_FILE,
    MODEL_FILE,
    VOCAB_FORMAT,
)

DEFAULT_EXTRA_IDS = 100
EMBEDDING_MULTIPLE = 128
PAD_ID, EOS_ID, UNK_ID, BOS_ID = 0, 1, 2, -1
_USER_DEFINED = 4  # ModelProto.SentencePiece.Type.USER_DEFINED


def round_embedding_size(vocab_size: int, multiple: int = EMBEDDING_MULTIPLE) -> int:
    """E: V rounded up to a multiple of 128 (32,100 -> 32,128)."""
    return -(-vocab_size // multiple) * multiple


def sentinel_piece(k: int) -> str:
    return f"\u2581<extra_id_{k}>"


# --- protobuf wire helpers (ModelProto: field 1 = repeated SentencePiece pieces) -----------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise InputError("truncated SentencePiece model (bad varint)")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def proto_fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes, int]]:
    """(field number, wire type, value, end offset) of each top-level field of a serialized
    protobuf message: an int for varints, the raw bytes otherwise. Enough of the wire format to
    edit or read a SentencePiece ModelProto without a protobuf runtime."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, end = _read_varint(buf, pos)
        else:
            if wire == 2:
                size, pos = _read_varint(buf, pos)
            elif wire in (1, 5):
                size = 8 if wire == 1 else 4
            else:
                raise InputError(f"unexpected protobuf wire type {wire} in a SentencePiece model")
            end = pos + size
            if end > len(buf):
                raise InputError("truncated SentencePiece model")
            value = buf[pos:end]
        yield field, wire, value, end
        pos = end


def _piece_bytes(piece: str, score: float = 0.0, type_: int = _USER_DEFINED) -> bytes:
    """One `SentencePiece{piece, score, type}` message, as ModelProto.SerializeToString writes it."""
    name = piece.encode("utf-8")
    body = (
        b"\x0a"
        + _varint(len(name))
        + name
        + b"\x15"
        + struct.pack("<f", score)
        + b"\x18"
        + _varint(type_)
    )
    return b"\x0a" + _varint(len(body)) + body


def add_extra_ids(model_proto: bytes, extra_ids: int) -> bytes:
    """Append `extra_ids` USER_DEFINED pieces in reverse order (`▁<extra_id_{N-1}>` first).

    The new entries go right after the last existing piece (field 1), before trainer_spec etc.,
    which is where a canonical serializer (fields in number order) puts them.
    """
    insert_at = 0
    for field, _wire, _value, end in proto_fields(model_proto):
        if field == 1:
            insert_at = end
    extra = b"".join(_piece_bytes(sentinel_piece(k)) for k in reversed(range(extra_ids)))
    return model_proto[:insert_at] + extra + model_proto[insert_at:]


# --- the Vocabulary -------------------------------------------------------------------------------


class Vocabulary:
    """Encode/decode with a SentencePiece model; sentinel ids above the trained pieces.

    Load a `c4forge vocab` folder (`Vocabulary.load(dir)`, verified against vocab.json), or an
    external plain model such as T5's `spiece.model` (`Vocabulary.load(path, extra_ids=100)`).
    Picklable (carries the model bytes), so Beam workers can receive it.
    """

    def __init__(
        self,
        model_proto: bytes,
        *,
        extra_ids: int = DEFAULT_EXTRA_IDS,
        plain_model_path: str | None = None,
        model_path: str | None = None,
        descriptor_extra: dict[str, Any] | None = None,
    ) -> None:
        import sentencepiece as spm

        if extra_ids < 0:
            raise ConfigError(f"extra_ids must be >= 0, got {extra_ids}")
        self._proto = model_proto
        self.extra_ids = extra_ids
        self.plain_model_path = plain_model_path
        self.model_path = model_path
        self._descriptor_extra = dict(descriptor_extra or {})
        self.sha256 = hashlib.sha256(model_proto).hexdigest()
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(model_proto)
        except Exception as err:
            raise InputError(
                f"{plain_model_path or 'model'}: not a SentencePiece model ({err})"
            ) from err
        self.num_pieces = self._sp.GetPieceSize()
        self.pad_id, self.eos_id, self.unk_id, self.bos_id = (
            self._sp.pad_id(),
            self._sp.eos_id(),
            self._sp.unk_id(),
            self._sp.bos_id(),
        )
        if (self.pad_id, self.eos_id) != (PAD_ID, EOS_ID):
            # Objectives and shards hard-code pad 0 / EOS 1 (T5); a BERT/Llama model would corrupt them.
            raise ConfigError(
                f"{plain_model_path or 'model'}: pad/eos ids are {self.pad_id}/{self.eos_id}; "
                f"c4forge needs T5's conventions pad 0, eos 1 (train one with `c4forge vocab`)"
            )
        self._sp_extra = None
        self._numpy_out = True  # sentencepiece can return numpy arrays (checked on first use)

    # -- construction --------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str, *, extra_ids: int | None = None) -> Vocabulary:
        """A vocab folder (vocab.json + models) or a plain `.model` file plus `extra_ids` (100)."""
        if os.path.basename(path) == DESCRIPTOR_FILE:
            path = os.path.dirname(path) or "."
        if os.path.isdir(path):
            return cls._load_dir(path, extra_ids)
        if not os.path.exists(path):
            raise InputError(
                f"vocabulary {path} does not exist (expected a `c4forge vocab` folder "
                f"or a SentencePiece .model file)"
            )
        with open(path, "rb") as f:
            proto = f.read()
        return cls(
            proto,
            extra_ids=DEFAULT_EXTRA_IDS if extra_ids is None else extra_ids,
            plain_model_path=path,
            model_path=None,
        )

    @classmethod
    def _load_dir(cls, directory: str, extra_ids: int | None) -> Vocabulary:
        desc_path = os.path.join(directory, DESCRIPTOR_FILE)
        if not os.path.exists(desc_path):
            raise InputError(
                f"{directory}: no {DESCRIPTOR_FILE} (not a finished `c4forge vocab` output)"
            )
        desc = read_json(desc_path)
        check_format(desc, desc_path, VOCAB_FORMAT)
        plain = os.path.join(directory, MODEL_FILE)
        if not os.path.exists(plain):
            raise InputError(f"{directory}: {MODEL_FILE} is missing")
        with open(plain, "rb") as f:
            proto = f.read()
        digest = hashlib.sha256(proto).hexdigest()
        if digest != desc.get("sha256"):
            raise VerificationError(
                f"{plain}: sha256 {digest} does not match {DESCRIPTOR_FILE} ({desc.get('sha256')})"
            )
        n_extra = int(desc.get("extra_ids", DEFAULT_EXTRA_IDS))
        if extra_ids is not None and extra_ids != n_extra:
            raise ConfigError(f"{directory} was built with {n_extra} extra ids, not {extra_ids}")
        extra_path = os.path.join(directory, EXTRA_IDS_MODEL_FILE)
        vocab = cls(
            proto,
            extra_ids=n_extra,
            plain_model_path=plain,
            model_path=extra_path if os.path.exists(extra_path) else None,
        )
        if vocab.num_pieces != desc.get("num_pieces"):
            raise VerificationError(
                f"{plain}: {vocab.num_pieces} pieces, vocab.json says {desc.get('num_pieces')}"
            )
        return vocab

    def __getstate__(self) -> dict[str, Any]:
        return {
            "proto": self._proto,
            "extra_ids": self.extra_ids,
            "plain": self.plain_model_path,
            "model": self.model_path,
            "extra": self._descriptor_extra,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(
            state["proto"],
            extra_ids=state["extra_ids"],
            plain_model_path=state["plain"],
            model_path=state["model"],
            descriptor_extra=state["extra"],
        )

    # -- sizes and ids ---------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """V: trained pieces + extra ids (32,100 for T5)."""
        return self.num_pieces + self.extra_ids

    @property
    def embedding_size(self) -> int:
        """E: V rounded up to a multiple of 128; rows >= V are never produced by data."""
        return round_embedding_size(self.vocab_size)

    def sentinel(self, k: int) -> int:
        """`<extra_id_k>` = V - 1 - k (from V, never from E)."""
        if not 0 <= k < self.extra_ids:
            raise ConfigError(
                f"sentinel {k} needs more than the vocabulary's {self.extra_ids} extra ids"
            )
        return self.vocab_size - 1 - k

    def descriptor(self) -> dict[str, Any]:
        """The `vocabulary` block of a shard set's index.json (formats.md §3.3)."""
        return {
            "sha256": self.sha256,
            "num_pieces": self.num_pieces,
            "extra_ids": self.extra_ids,
            "vocab_size": self.vocab_size,
            "embedding_size": self.embedding_size,
            "pad_id": self.pad_id,
            "eos_id": self.eos_id,
            "unk_id": self.unk_id,
            "bos_id": self.bos_id,
        }

    # -- text <-> ids ----------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Ids of `text`, no EOS; sentinel text is NOT recognised (plain model)."""
        return self._sp.EncodeAsIds(text)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 1) -> list[list[int]]:
        """Batch encode (SentencePiece's C++ loop; output order = input order, thread-count-free)."""
        return self._sp.Encode(list(texts), out_type=int, num_threads=num_threads)

    def encode_arrays(self, texts: Sequence[str], num_threads: int = 1) -> list[Any]:
        """Batch encode straight into int32 numpy arrays (same ids as `encode_batch`).

        Why: the shard job's objectives are numpy code, and converting SentencePiece's Python
        int lists costs ~15 % of the encoding itself; sentencepiece ≥ 0.2.1 can hand out
        numpy buffers directly (`out_type="numpy"`). Older versions fall back to converting.
        """
        import numpy as np

        if self._numpy_out:
            try:
                return self._sp.Encode(list(texts), out_type="numpy", num_threads=num_threads)
            except (ValueError, TypeError):  # this sentencepiece has no numpy output
                self._numpy_out = False
        return [np.asarray(x, dtype=np.int32) for x in self.encode_batch(texts, num_threads)]

    def encode_with_sentinels(self, text: str) -> list[int]:
        """Like seqio: `<extra_id_k>` at a word start becomes its sentinel id (the reference check)."""
        if self._sp_extra is None:
            import sentencepiece as spm

            sp = spm.SentencePieceProcessor()
            sp.LoadFromSerializedProto(add_extra_ids(self._proto, self.extra_ids))
            self._sp_extra = sp
        return self._sp_extra.EncodeAsIds(text)

    def extra_ids_model_proto(self) -> bytes:
        return add_extra_ids(self._proto, self.extra_ids)

    def id_to_piece(self, i: int) -> str:
        if self.num_pieces <= i < self.vocab_size:
            return sentinel_piece(self.vocab_size - 1 - i)
        return self._sp.IdToPiece(int(i))

    def piece_to_id(self, piece: str) -> int:
        return self._sp.PieceToId(piece)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; pad (0) and EOS (1) are dropped, sentinels render as `<extra_id_k>`."""
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            i = int(i)
            if i >= self.num_pieces:
                if run:
                    out.append(self._sp.DecodeIds(run))
                    run = []
                if i >= self.vocab_size:
                    raise ValueError(f"id {i} is outside the vocabulary (V = {self.vocab_size})")
                out.append(f"<extra_id_{self.vocab_size - 1 - i}>")
            elif i not in (self.pad_id, self.eos_id):
                run.append(i)
        if run:
            out.append(self._sp.DecodeIds(run))
        return "".join(out)

    def __repr__(self) -> str:
        return (
            f"Vocabulary(pieces={self.num_pieces}, extra_ids={self.extra_ids}, "
            f"V={self.vocab_size}, E={self.embedding_size}, sha256={self.sha256[:12]})"
        )
