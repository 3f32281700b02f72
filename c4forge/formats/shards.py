"""Training shards on disk (formats.md §3): Arrow IPC stream files plus an ``index.json`` manifest.

One module owns the byte layout so that the Beam writer, ``c4forge shards verify`` and the
trainer agree on it: column types, schema metadata, the manifest and its fingerprint, the
``_progress/`` records that make a rerun finish only the missing shards, and the §3.6 checks
that refuse a shard set built for another vocabulary, objective or build.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from c4forge.errors import ConfigError, VerificationError
from c4forge.io import storage
from c4forge.io.names import member_name
from c4forge.io.storage import (
    check_format,
    dumps_canonical,
    sha256_bytes,
)
from c4forge.vocab.vocab_files import (
    COPY_DIR,
    MODEL_FILE,
    VOCAB_FILES,
    Files,
    read_descriptor,
    write_files,
)

FORMAT = "c4forge.shards"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
METADATA_KEY = b"c4forge"
INDEX_NAME = "index.json"
PROGRESS_DIR = "_progress"
COMPRESSIONS = (None, "lz4")
VOCAB_DIR = COPY_DIR  # the shard set's copy of its vocabulary (§3.3 `vocab_files`)
VOCAB_INDEX_KEY = "vocab_files"
VOCAB_MODEL_FILE = MODEL_FILE

# Arrow type names used in index.json's "schema" (the spec's spelling, not Arrow's str()).
_SCALAR_TYPES: dict[str, pa.DataType] = {
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "int32": pa.int32(),
    "float": pa.float32(),
}
_LIST_PREFIX = "fixed_size_list<"


# ----------------------------------------------------------------------------- names and types


def shard_file_name(split: str, index: int, count: int) -> str:
    """``train-00003-of-00064.arrow`` (§3.1)."""
    return f"{split}-{index:05d}-of-{count:05d}.arrow"


def choose_token_dtype(embedding_size: int, requested: str = "auto") -> str:
    """uint16 while every id the model can see fits, else int32 (§3.1); ``int32`` forces it."""
    if requested not in ("auto", "uint16", "int32"):
        raise ConfigError(f"--token-dtype must be auto, uint16 or int32, got {requested!r}")
    if requested == "int32":
        return "int32"
    if embedding_size > 65536:
        if requested == "uint16":
            raise ConfigError(
                f"--token-dtype uint16 cannot hold ids of a {embedding_size}-row embedding "
                "(more than 65,536); use int32"
            )
        return "int32"
    return "uint16"


LAYOUTS = ("encoder_decoder", "mlm_nsp")  # the column layouts of §3.2


def column_spec(
    objective: str,
    packing: str,
    inputs_length: int,
    targets_length: int,
    token_dtype: str,
    *,
    max_predictions: int = 20,
) -> list[dict[str, Any]]:
    """The ``schema`` list of index.json for an objective (its registry entry names the
    layout) and packing mode (§3.2)."""
    from c4forge.objectives.registry import OBJECTIVES

    spec = OBJECTIVES.get(objective)
    if spec is None:
        raise ConfigError(f"unknown objective {objective!r}")
    return column_layout(
        spec.layout,
        packing,
        inputs_length,
        targets_length,
        token_dtype,
        max_predictions=max_predictions,
    )


def column_layout(
    layout: str,
    packing: str,
    inputs_length: int,
    targets_length: int,
    token_dtype: str,
    *,
    max_predictions: int = 20,
) -> list[dict[str, Any]]:
    """The ``schema`` list of one of the §3.2 layouts."""
    tok = f"{_LIST_PREFIX}{token_dtype}>"
    if layout == "mlm_nsp":
        return [
            {"name": "input_ids", "type": tok, "length": inputs_length},
            {"name": "token_type_ids", "type": f"{_LIST_PREFIX}uint8>", "length": inputs_length},
            {"name": "masked_lm_positions", "type": tok, "length": max_predictions},
            {"name": "masked_lm_ids", "type": tok, "length": max_predictions},
            {
                "name": "masked_lm_weights",
                "type": f"{_LIST_PREFIX}float>",
                "length": max_predictions,
            },
            {"name": "next_sentence_label", "type": "uint8"},
        ]
    if layout != "encoder_decoder":
        raise ConfigError(f"unknown column layout {layout!r} (expected one of {LAYOUTS})")
    spec = [
        {"name": "inputs", "type": tok, "length": inputs_length},
        {"name": "targets", "type": tok, "length": targets_length},
    ]
    if packing == "per_document":
        # Segment ids and positions are < 65,536 whatever the vocabulary (§3.2), but follow the
        # token dtype when int32 is forced so that a reader can widen every column the same way.
        seg = f"{_LIST_PREFIX}{'uint16' if token_dtype == 'uint16' else 'int32'}>"
        for side, length in (("inputs", inputs_length), ("targets", targets_length)):
            spec.append({"name": f"{side}_segment_ids", "type": seg, "length": length})
            spec.append({"name": f"{side}_positions", "type": seg, "length": length})
    elif packing != "concat":
        raise ConfigError(f"--packing must be concat or per_document, got {packing!r}")
    return spec


def _arrow_type(entry: Mapping[str, Any]) -> pa.DataType:
    name = entry["type"]
    if name.startswith(_LIST_PREFIX) and name.endswith(">"):
        value = _SCALAR_TYPES[name[len(_LIST_PREFIX) : -1]]
        # Inner values non-nullable too: a token is never missing, and a reader may rely on it.
        return pa.list_(pa.field("item", value, nullable=False), int(entry["length"]))
    return _SCALAR_TYPES[name]


def numpy_dtype(entry: Mapping[str, Any]) -> np.dtype:
    name = entry["type"]
    if name.startswith(_LIST_PREFIX):
        name = name[len(_LIST_PREFIX) : -1]
    return np.dtype("float32" if name == "float" else name)


def arrow_schema(
    spec: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any] | None
) -> pa.Schema:
    """Arrow schema of a shard: every field non-nullable, ``c4forge`` metadata as canonical JSON."""
    fields = [pa.field(e["name"], _arrow_type(e), nullable=False) for e in spec]
    meta = (
        {METADATA_KEY: dumps_canonical(dict(metadata)).encode()} if metadata is not None else None
    )
    return pa.schema(fields, metadata=meta)


def shard_metadata(
    fingerprint: str, vocab_sha256: str, split: str, index: int, count: int
) -> dict[str, Any]:
    """The per-file ``c4forge`` metadata that makes a single shard self-describing (§3.2)."""
    return {
        "format_version": FORMAT_VERSION,
        "dataset_fingerprint": fingerprint,
        "vocab_sha256": vocab_sha256,
        "split": split,
        "shard_index": index,
        "num_shards": count,
    }


FINGERPRINT_KEYS = ("objective", "schema", "seed", "source", "token_dtype", "vocabulary")


def dataset_fingerprint(manifest: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of the fields that determine the rows (§3.3)."""
    return sha256_bytes(dumps_canonical({k: manifest[k] for k in FINGERPRINT_KEYS}).encode())


# ----------------------------------------------------------------------------- writing


def token_counts(
    spec: Sequence[Mapping[str, Any]], columns: Mapping[str, np.ndarray]
) -> tuple[int, int]:
    """Non-padding (non-zero) tokens on the input and target side (§3.3)."""
    names = {e["name"] for e in spec}
    if "inputs" in names:
        return int(np.count_nonzero(columns["inputs"])), int(np.count_nonzero(columns["targets"]))
    # bert_mlm_nsp: the encoder tokens, and the real (weighted) predictions.
    return (
        int(np.count_nonzero(columns["input_ids"])),
        int(np.count_nonzero(columns["masked_lm_weights"])),
    )


def arrow_array(data: np.ndarray, entry: Mapping[str, Any], typ: pa.DataType) -> pa.Array:
    """Column ``entry`` of some rows as an Arrow array of ``typ`` (its ``arrow_type``), over the
    rows' memory when they are contiguous in its dtype (no copy, no nulls).

    Why not ``pa.array``: its first call in a process imports pandas (≈ 0.2 CPU-s, ten times
    the cost of writing a 20 MB run file), and it re-checks what the layout already fixes.
    """
    flat = np.ascontiguousarray(data, dtype=numpy_dtype(entry)).reshape(-1)
    if "length" in entry:
        return pa.FixedSizeListArray.from_arrays(plain_array(flat, typ.value_type), type=typ)
    return plain_array(flat, typ)


def plain_array(flat: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A 1-D numpy array as an Arrow array of the same width over its memory (no nulls)."""
    flat = np.ascontiguousarray(flat)
    if flat.ndim != 1 or flat.dtype.itemsize * 8 != typ.bit_width:
        raise ValueError(f"{flat.dtype} array of shape {flat.shape} is no {typ} column")
    return pa.Array.from_buffers(typ, len(flat), [None, pa.py_buffer(flat)])


def _batch(schema: pa.Schema, spec: Sequence[Mapping[str, Any]], columns, lo: int, hi: int):
    arrays = [arrow_array(columns[e["name"]][lo:hi], e, f.type) for e, f in zip(spec, schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def check_columns(spec: Sequence[Mapping[str, Any]], columns: Mapping[str, np.ndarray]) -> int:
    """Row count of ``columns`` after checking names, widths and value range against ``spec``."""
    rows = None
    for entry in spec:
        name = entry["name"]
        if name not in columns:
            raise ValueError(f"column {name!r} missing (have {sorted(columns)})")
        col = np.asarray(columns[name])
        want = (col.shape[0], entry["length"]) if "length" in entry else (col.shape[0],)
        if col.shape != want:
            raise ValueError(f"column {name!r} has shape {col.shape}, expected {want}")
        rows = col.shape[0] if rows is None else rows
        if col.shape[0] != rows:
            raise ValueError(f"column {name!r} has {col.shape[0]} rows, others {rows}")
        dtype = numpy_dtype(entry)
        if col.size and col.dtype != dtype and np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            if col.min() < info.min or col.max() > info.max:
                raise ValueError(f"column {name!r} has values outside {dtype}")
    return rows or 0


def write_shard(
    path: str,
    spec: Sequence[Mapping[str, Any]],
    columns: Mapping[str, np.ndarray],
    metadata: Mapping[str, Any],
    *,
    batch_rows: int = 1024,
    compression: str | None = None,
) -> dict[str, Any]:
    """Write one shard atomically; return its progress record (rows, tokens, bytes, sha256).

    Rows are written in the order given (the caller sorts by key). An empty shard still gets
    one empty record batch: ``datasets.Dataset.from_file`` cannot open a stream with none.
    """
    rows = check_columns(spec, columns)
    batches = (
        {k: v[lo : min(rows, lo + batch_rows)] for k, v in columns.items()}
        for lo in range(0, rows, batch_rows)
    )
    return write_shard_batches(path, spec, batches, metadata, compression=compression)


def empty_columns(spec: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Zero rows of every column of ``spec`` (an empty shard's only batch)."""
    return {
        e["name"]: np.zeros((0, e["length"]) if "length" in e else (0,), numpy_dtype(e))
        for e in spec
    }


def write_shard_batches(
    path: str,
    spec: Sequence[Mapping[str, Any]],
    batches: Iterable[Mapping[str, np.ndarray]],
    metadata: Mapping[str, Any],
    *,
    compression: str | None = None,
) -> dict[str, Any]:
    """``write_shard`` from its record batches, one at a time (a merge of sorted runs never
    holds the shard): the same bytes as ``write_shard`` when every batch but the last has
    ``batch_rows`` rows. No batch at all: one empty record batch, as ``write_shard``."""
    if compression not in COMPRESSIONS:
        raise ConfigError(f"--compression must be none or lz4, got {compression!r}")
    schema = arrow_schema(spec, metadata)
    options = pa.ipc.IpcWriteOptions(compression=compression)
    rows = inputs = targets = 0
    with storage.atomic_writer(path) as f:
        sink = storage.HashingWriter(f)
        with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), schema, options=options) as writer:
            for columns in batches:
                n = check_columns(spec, columns)
                writer.write_batch(_batch(schema, spec, columns, 0, n))
                i, t = token_counts(spec, columns)
                rows, inputs, targets = rows + n, inputs + i, targets + t
            if rows == 0:
                writer.write_batch(_batch(schema, spec, empty_columns(spec), 0, 0))
    return {
        "file": storage.basename(path),
        "rows": rows,
        "input_tokens": inputs,
        "target_tokens": targets,
        "bytes": sink.size,
        "sha256": sink.sha256.hexdigest(),
    }


class Progress:
    """``_progress/<name>.json``: one record per finished shard, written after its file (§3.4).

    A record is trusted only while the file beside it still has the recorded sha256, so a shard
    that was truncated or replaced after its record was written is rebuilt on the next run.
    Local or remote (`storage`): a Dataflow build keeps its records in the bucket.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = storage.join(directory, PROGRESS_DIR)

    def record_path(self, name: str) -> str:
        return storage.join(self.path, f"{name}.json")

    def save(self, record: Mapping[str, Any]) -> None:
        storage.write_json(self.record_path(record["file"]), dict(record))

    def load(self, name: str) -> dict[str, Any] | None:
        path = self.record_path(name)
        try:
            if storage.is_remote(path) and not storage.exists(path):
                return None
            return storage.read_json(path)
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def finished(self, name: str, fingerprint: str) -> dict[str, Any] | None:
        """The record of a shard that is complete and intact, else None (it must be rebuilt)."""
        rec = self.load(name)
        path = storage.join(self.directory, name)
        if rec is None or rec.get("dataset_fingerprint") != fingerprint or not storage.exists(path):
            return None
        if storage.size(path) != rec.get("bytes") or storage.sha256(path) != rec.get("sha256"):
            return None
        return rec

    def names(self) -> list[str]:
        return [n[: -len(".json")] for n in storage.listdir(self.path) if n.endswith(".arrow.json")]


def split_summary(num_shards: int, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The per-split block of index.json from the shard records (in shard order)."""
    keep = ("file", "rows", "input_tokens", "target_tokens", "bytes", "sha256")
    shards = [{k: r[k] for k in keep} for r in records]
    return {
        "num_shards": num_shards,
        "rows": sum(r["rows"] for r in shards),
        "input_tokens": sum(r["input_tokens"] for r in shards),
        "target_tokens": sum(r["target_tokens"] for r in shards),
        "shards": shards,
    }


def library_versions() -> dict[str, str]:
    import sentencepiece

    return {
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "sentencepiece": sentencepiece.__version__,
    }


def padding_fraction(split: Mapping[str, Any], length: int, key: str = "input_tokens") -> float:
    """1 − tokens / (rows · length) (§3.3); 0 for an empty split."""
    cells = split["rows"] * length
    return 1.0 - split[key] / cells if cells else 0.0


def make_manifest(
    *,
    objective: Mapping[str, Any],
    schema: Sequence[Mapping[str, Any]],
    seed: int,
    source: Mapping[str, Any],
    token_dtype: str,
    vocabulary: Mapping[str, Any],
    batch_rows: int,
    compression: str | None,
    created_by: str,
) -> dict[str, Any]:
    """index.json without ``splits``/``stats``/``versions``; its fingerprint is already final."""
    manifest: dict[str, Any] = {
        "arrow": {"batch_rows": batch_rows, "compression": compression, "ipc": "stream"},
        "created_by": created_by,
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "objective": dict(objective),
        "schema": [dict(e) for e in schema],
        "seed": seed,
        "source": dict(source),
        "token_dtype": token_dtype,
        "vocabulary": dict(vocabulary),
    }
    manifest["dataset_fingerprint"] = dataset_fingerprint(manifest)
    return manifest


def write_index(directory: str, manifest: Mapping[str, Any]) -> str:
    """Write index.json (the completion marker, last) and drop ``_progress/`` (§3.4 step 4)."""
    path = storage.join(directory, INDEX_NAME)
    storage.write_json(path, dict(manifest))
    storage.rmtree(storage.join(directory, PROGRESS_DIR))
    return path


# ----------------------------------------------------------------------------- reading


def check_vocab_copy(
    output: str,
    block: Mapping[str, Any],
    vocabulary: Mapping[str, Any],
    *,
    checksums: bool,
) -> None:
    """Every listed file present with its size (and, with ``checksums``, its sha256), and the
    model's fingerprint equal to ``vocabulary.sha256``; else a VerificationError naming it.

    The block names a folder inside the set and the files of a vocabulary folder, nothing
    else (``member_name``). With ``checksums`` each file's content is also bound to
    ``vocabulary``, which ``dataset_fingerprint`` covers (``check_copy_content``): the block
    itself stays out of the fingerprint, so existing sets keep their bytes, yet no byte of the
    copy can change without failing against a fingerprinted field."""
    index_path = storage.join(output, INDEX_NAME)
    folder = member_name(block.get("directory", VOCAB_DIR), index_path, "vocab_files.directory")
    directory = storage.join(output, folder)
    names = [rec.get("file") for rec in block.get("files", [])]
    for name in names:
        if name not in VOCAB_FILES:
            raise VerificationError(
                f"{index_path}: vocab_files lists {name!r}, not a vocabulary file "
                f"({', '.join(VOCAB_FILES)})"
            )
    if VOCAB_MODEL_FILE not in names:
        raise VerificationError(f"{directory}: index.json lists no {VOCAB_MODEL_FILE}")
    contents: dict[str, bytes] = {}
    for rec in block["files"]:
        path = storage.join(directory, rec["file"])
        if not storage.exists(path):
            raise VerificationError(f"{path}: missing (index.json lists {rec['bytes']} bytes)")
        size = storage.size(path)
        if size != rec["bytes"]:
            raise VerificationError(
                f"{path}: size expected {rec['bytes']} bytes (index.json), found {size}"
            )
        if rec["file"] == VOCAB_MODEL_FILE and rec["sha256"] != vocabulary.get("sha256"):
            raise VerificationError(
                f"{path}: index.json records sha256 {rec['sha256']}, but the shards were built "
                f"with vocabulary {vocabulary.get('sha256')}"
            )
        if checksums:
            data = storage.read_bytes(path)  # a vocabulary's files are small
            digest = sha256_bytes(data)
            if digest != rec["sha256"]:
                raise VerificationError(
                    f"{path}: sha256 expected {rec['sha256']} (index.json), found {digest}"
                )
            contents[rec["file"]] = data
    if checksums:
        check_copy_content(directory, contents, vocabulary)


def check_copy_content(
    directory: str, contents: Mapping[str, bytes], vocabulary: Mapping[str, Any]
) -> None:
    """Each file of a vocabulary copy agrees with ``vocabulary`` (index.json's block, inside
    ``dataset_fingerprint``): the model's sha256 is ``vocabulary.sha256`` (checked by the
    caller), the extra-ids model is the one made from that model and ``extra_ids``, and
    vocab.json states the same values for every key of ``vocabulary``."""
    from c4forge.vocab.vocab import add_extra_ids
    from c4forge.vocab.vocab_files import DESCRIPTOR_FILE, EXTRA_IDS_MODEL_FILE

    model = contents.get(VOCAB_MODEL_FILE)
    extra = contents.get(EXTRA_IDS_MODEL_FILE)
    if model is not None and extra is not None:
        made = add_extra_ids(model, int(vocabulary.get("extra_ids", 0)))
        if made != extra:
            raise VerificationError(
                f"{storage.join(directory, EXTRA_IDS_MODEL_FILE)}: not the model that "
                f"{VOCAB_MODEL_FILE} with {vocabulary.get('extra_ids')} extra ids makes"
            )
    raw = contents.get(DESCRIPTOR_FILE)
    if raw is not None:
        path = storage.join(directory, DESCRIPTOR_FILE)
        try:
            desc = json.loads(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise VerificationError(f"{path}: not valid JSON ({err})") from err
        for key, value in vocabulary.items():
            if not isinstance(desc, dict) or desc.get(key) != value:
                found = desc.get(key) if isinstance(desc, dict) else None
                raise VerificationError(
                    f"{path}: {key} is {found!r}, index.json's vocabulary says {value!r}"
                )


# ----------------------------------------------------------------------------- the vocabulary copy


def _record(name: str, data: bytes) -> dict[str, Any]:
    return {"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def expected_block(files: Files) -> dict[str, Any]:
    """The index.json ``vocab_files`` block a copy of ``files`` has."""
    return {"directory": VOCAB_DIR, "files": [_record(n, d) for n, d in sorted(files)]}


def write_vocab_copy(output: str, files: Files, vocabulary: Mapping[str, Any]) -> dict[str, Any]:
    """Write the shard set's copy (``OUTPUT/vocab``) and check it against its block and the
    shards' fingerprint; returns index.json's ``vocab_files`` block."""
    write_files(storage.join(output, VOCAB_DIR), files)
    block = expected_block(files)
    check_vocab_copy(output, block, vocabulary, checksums=True)
    return block


def copy_is_current(output: str, index: Mapping[str, Any], files: Files) -> bool:
    """Does the finished set at ``output`` hold an intact copy of exactly ``files``?"""
    block = index.get(VOCAB_INDEX_KEY)
    if block != expected_block(files):
        return False
    try:
        check_vocab_copy(output, block, index["vocabulary"], checksums=True)
    except VerificationError:
        return False
    return True


def epoch_shard_order(num_shards: int, seed: int, epoch: int) -> list[int]:
    """The order in which epoch ``epoch`` visits the train shards (formats.md §3.5).

    A permutation of ``range(num_shards)`` drawn by ``numpy.random.default_rng([seed, epoch])``
    (PCG64 seeded through SeedSequence: stable across numpy versions and platforms). Together
    with the manifest's per-shard row counts it defines the global row index, so a resumed run
    finds its place from the step number alone.
    """
    if num_shards < 0 or seed < 0 or epoch < 0:
        raise ValueError("num_shards, seed and epoch must be non-negative")
    return [int(i) for i in np.random.default_rng([seed, epoch]).permutation(num_shards)]


def check_vocabulary(index_path: str, built: Mapping[str, Any], run: Mapping[str, Any]) -> None:
    """§3.6 step 2: same vocabulary fingerprint, size and extra ids, or a message naming both."""
    same = built.get("sha256") == run.get("sha256")
    for key in ("vocab_size", "extra_ids"):
        if run.get(key) is not None and built.get(key) != run.get(key):
            same = False
    if not same:
        theirs = f" ({run['vocab_size']} ids)" if run.get("vocab_size") is not None else ""
        raise VerificationError(
            f"{index_path} was built with vocabulary {built.get('sha256')} "
            f"({built.get('vocab_size')} ids); this run uses {run.get('sha256')}{theirs}"
        )


def _vocab_run_descriptor(vocab: Any) -> dict[str, Any]:
    """Accept a vocab.json dict, a Vocabulary object, or a vocab directory / vocab.json path."""
    if vocab is None:
        return {}
    if isinstance(vocab, Mapping):
        return dict(vocab)
    if isinstance(vocab, (str, os.PathLike)):
        return read_descriptor(os.fspath(vocab))
    if hasattr(vocab, "descriptor"):
        return dict(vocab.descriptor())
    raise TypeError(f"cannot read a vocabulary from {type(vocab).__name__}")


@dataclass
class ShardSet:
    """A verified shard directory. Use :meth:`open`; every read re-checks what it touches."""

    directory: str
    index: dict[str, Any]
    fingerprint: str
    vocab: dict[str, Any]
    columns: list[str]
    schema: pa.Schema = field(repr=False)
    index_sha256: str = ""  # of index.json's bytes as read (a checkpoint records it)
    # ``verify_reads``: each shard's sha256 is computed from the bytes as they are read, the
    # first time this process reads it (``verified`` holds the paths already checked here).
    verify_reads: bool = False
    verified: set[str] = field(default_factory=set, repr=False, compare=False)

    @property
    def remote(self) -> bool:
        return storage.is_remote(self.directory)

    @property
    def vocab_dir(self) -> str | None:
        """The shard set's copy of its vocabulary (a `c4forge vocab` folder), if it has one."""
        block = self.index.get(VOCAB_INDEX_KEY)
        if not block:
            return None
        index_path = storage.join(self.directory, INDEX_NAME)
        folder = member_name(block.get("directory", VOCAB_DIR), index_path, "vocab_files.directory")
        return storage.join(self.directory, folder)

    @classmethod
    def open(
        cls,
        path: str,
        *,
        vocab_sha256: str | None = None,
        inputs_length: int | None = None,
        targets_length: int | None = None,
        vocab: Any = None,
        full: bool = False,
        verify_reads: bool = False,
    ) -> ShardSet:
        """Open and verify ``path`` (§3.6 steps 1–3, plus existence and sizes of every file).

        ``vocab`` (vocab.json dict, directory, or Vocabulary) also checks vocab_size/extra_ids;
        ``full=True`` opens every shard (schema, metadata, row count) and recomputes its sha256;
        ``verify_reads=True`` checks each shard's sha256 on the bytes of its first read instead
        (no pass of its own: ``iter_batches``).
        """
        remote = storage.is_remote(path)
        index_path = storage.join(path, INDEX_NAME)
        if not remote and not os.path.isdir(path):
            raise VerificationError(f"{path}: shard directory not found")
        if not storage.exists(index_path):
            unfinished = (
                storage.listdir(storage.join(path, PROGRESS_DIR))
                if remote
                else os.path.isdir(os.path.join(path, PROGRESS_DIR))
            )
            hint = " (an unfinished build: rerun `c4forge shards`)" if unfinished else ""
            raise VerificationError(f"{index_path}: manifest not found{hint}")
        try:
            raw = storage.read_bytes(index_path)
            index = json.loads(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise VerificationError(f"{index_path}: not valid JSON ({err})") from err
        check_format(index, index_path, FORMAT, SUPPORTED_VERSIONS)
        missing = [
            k
            for k in (*FINGERPRINT_KEYS, "splits", "arrow", "dataset_fingerprint")
            if k not in index
        ]
        if missing:
            raise VerificationError(f"{index_path}: missing fields {missing}")
        fingerprint = dataset_fingerprint(index)
        if fingerprint != index["dataset_fingerprint"]:
            raise VerificationError(
                f"{index_path}: dataset_fingerprint expected {fingerprint} (recomputed), "
                f"found {index['dataset_fingerprint']}"
            )
        built = index["vocabulary"]
        run = _vocab_run_descriptor(vocab)
        if vocab_sha256 is not None:
            run.setdefault("sha256", vocab_sha256)
            if run["sha256"] != vocab_sha256:
                raise ValueError("vocab_sha256 disagrees with vocab")
        if run:
            check_vocabulary(index_path, built, run)
        for name, want in (("inputs_length", inputs_length), ("targets_length", targets_length)):
            found = index["objective"].get(name)
            if want is not None and found != want:
                raise VerificationError(
                    f"{index_path}: objective.{name} is {found}; this run expects {want}"
                )
        present = set(storage.listdir(path)) if remote else None  # one listing, not N requests
        for split, block in index["splits"].items():
            if len(block["shards"]) != block["num_shards"]:
                raise VerificationError(
                    f"{index_path}: split {split} lists {len(block['shards'])} shards, "
                    f"expected num_shards = {block['num_shards']}"
                )
            for i, rec in enumerate(block["shards"]):
                expected_name = shard_file_name(split, i, block["num_shards"])
                if rec["file"] != expected_name:
                    raise VerificationError(
                        f"{index_path}: shard {i} of {split} expected {expected_name}, found {rec['file']}"
                    )
                file = storage.join(path, rec["file"])
                if not (rec["file"] in present if present is not None else os.path.exists(file)):
                    raise VerificationError(
                        f"{file}: missing (index.json lists {rec['rows']} rows)"
                    )
                size = storage.size(file)
                if size != rec["bytes"]:
                    raise VerificationError(
                        f"{file}: size expected {rec['bytes']} bytes (index.json), found {size}"
                    )
        if VOCAB_INDEX_KEY in index:  # sizes and fingerprint here; sha256 in verify()
            check_vocab_copy(path, index[VOCAB_INDEX_KEY], built, checksums=False)
        shards = cls(
            directory=path,
            index=index,
            fingerprint=fingerprint,
            vocab=built,
            columns=[e["name"] for e in index["schema"]],
            schema=arrow_schema(index["schema"], None),
            index_sha256=sha256_bytes(raw),
            verify_reads=verify_reads,
        )
        if full:
            shards.verify(checksums=True)
        return shards

    def verify_vocab_copy(self) -> None:
        """The vocabulary copy's checksums and content (``check_vocab_copy``): a few small
        files, checked before a run copies or loads them (train's SHARDS/vocab)."""
        if VOCAB_INDEX_KEY in self.index:
            check_vocab_copy(
                self.directory, self.index[VOCAB_INDEX_KEY], self.vocab, checksums=True
            )

    # -- manifest views
    @property
    def splits(self) -> list[str]:
        return list(self.index["splits"])

    def _records(self, split: str) -> list[dict[str, Any]]:
        if split not in self.index["splits"]:
            raise VerificationError(
                f"{storage.join(self.directory, INDEX_NAME)}: no split {split!r} "
                f"(has {sorted(self.index['splits'])})"
            )
        return self.index["splits"][split]["shards"]

    def split_shards(self, split: str) -> list[tuple[str, int]]:
        """``[(path, rows)]`` in shard order."""
        return [(storage.join(self.directory, r["file"]), r["rows"]) for r in self._records(split)]

    def _record_for(self, path: str) -> tuple[str, int, dict[str, Any]]:
        name = storage.basename(path)
        for split, block in self.index["splits"].items():
            for i, rec in enumerate(block["shards"]):
                if rec["file"] == name:
                    return split, i, rec
        raise VerificationError(f"{path}: not listed in {storage.join(self.directory, INDEX_NAME)}")

    # -- per-file checks
    def _check_file_schema(self, path: str, found: pa.Schema, split: str, i: int) -> None:
        want_fields = [(f.name, f.type, f.nullable) for f in self.schema]
        got_fields = [(f.name, f.type, f.nullable) for f in found]
        if got_fields != want_fields or any(
            f.type.value_field.nullable for f in found if pa.types.is_fixed_size_list(f.type)
        ):
            raise VerificationError(
                f"{path}: schema expected {_schema_text(self.schema)}, found {_schema_text(found)}"
            )
        raw = (found.metadata or {}).get(METADATA_KEY)
        if raw is None:
            raise VerificationError(f"{path}: schema metadata 'c4forge' expected, found none")
        try:
            meta = json.loads(raw)
        except json.JSONDecodeError as err:
            raise VerificationError(
                f"{path}: schema metadata 'c4forge' is not JSON ({err})"
            ) from err
        count = self.index["splits"][split]["num_shards"]
        want = shard_metadata(self.fingerprint, self.vocab["sha256"], split, i, count)
        for key, value in want.items():
            if meta.get(key) != value:
                raise VerificationError(
                    f"{path}: metadata {key} expected {value!r} (index.json), found {meta.get(key)!r}"
                )

    def iter_batches(self, path: str, *, checksum: bool | None = None) -> Iterator[pa.RecordBatch]:
        """Record batches of one shard; checks schema, metadata and row count.

        Local shards are memory-mapped; remote ones (gs://, s3://, any Beam filesystem) are
        streamed through an open file of the storage layer, batch by batch (nothing is written
        to local disk; a trainer's DataLoader worker reads each shard it needs once per visit).

        ``checksum``: also hash the bytes as they are read and compare with index.json's sha256
        once the stream ends (a caller that keeps the batches must wait for the end: the last
        batch comes before the verdict). None: the set's ``verify_reads`` policy, on the first
        read of ``path`` in this process only.
        """
        if not storage.is_remote(path) and not os.path.isabs(path) and not os.path.exists(path):
            path = storage.join(self.directory, path)
        split, i, rec = self._record_for(path)
        if checksum is None:
            checksum = self.verify_reads and path not in self.verified
        rows = 0
        digest: Any = hashlib.sha256() if checksum else None
        try:
            if digest is None:
                with _open_shard(path) as source:
                    reader = pa.ipc.open_stream(source)
                    self._check_file_schema(path, reader.schema, split, i)
                    for batch in reader:
                        rows += batch.num_rows
                        yield batch
            else:
                with _HashedSource(path, digest) as hashed:
                    reader = pa.ipc.open_stream(hashed.source)
                    self._check_file_schema(path, reader.schema, split, i)
                    for batch in reader:
                        hashed.advance()
                        rows += batch.num_rows
                        yield batch
                    hashed.finish()
        except (pa.ArrowInvalid, OSError, VerificationError) as err:
            if checksum:  # damaged bytes: say so rather than what they broke
                self._check_sha256(path, rec, storage.sha256(path))
            if isinstance(err, VerificationError):
                raise
            raise VerificationError(f"{path}: unreadable Arrow stream ({err})") from err
        if digest is not None:
            self._check_sha256(path, rec, digest.hexdigest())
            self.verified.add(path)
        if rows != rec["rows"]:
            raise VerificationError(
                f"{path}: rows expected {rec['rows']} (index.json), found {rows}"
            )

    @staticmethod
    def _check_sha256(path: str, rec: Mapping[str, Any], found: str) -> None:
        if found != rec["sha256"]:
            raise VerificationError(
                f"{path}: sha256 expected {rec['sha256']} (index.json), found {found}"
            )

    def read_rows(self, split: str) -> dict[str, np.ndarray]:
        """Every row of a split as 2-D numpy arrays (small sets and tests only)."""
        parts: dict[str, list[np.ndarray]] = {e["name"]: [] for e in self.index["schema"]}
        for path, _ in self.split_shards(split):
            for batch in self.iter_batches(path):
                for e in self.index["schema"]:
                    parts[e["name"]].append(column_numpy(batch, e))
        return {
            e["name"]: np.concatenate(parts[e["name"]])
            if parts[e["name"]]
            else np.zeros((0, e["length"]) if "length" in e else (0,), dtype=numpy_dtype(e))
            for e in self.index["schema"]
        }

    def verify(self, *, checksums: bool = True, progress: bool = False) -> dict[str, int]:
        """§3.6 steps 4–5 on every shard: schema, metadata, rows, and (default) full sha256."""
        files = [(s, p) for s in self.splits for p, _ in self.split_shards(s)]
        bar = None
        if progress:
            from c4forge.progress import progress as progress_display

            bar = progress_display(total=len(files), unit="shard", desc="verify")
        rows = 0
        for _split, path in files:
            for batch in self.iter_batches(path, checksum=checksums):  # one pass: read + hash
                rows += batch.num_rows
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        if checksums and VOCAB_INDEX_KEY in self.index:
            check_vocab_copy(
                self.directory, self.index[VOCAB_INDEX_KEY], self.vocab, checksums=True
            )
        return {"files": len(files), "rows": rows}


def _open_shard(path: str) -> Any:
    """A readable Arrow source for one shard: a memory map, or the storage layer's stream."""
    if not storage.is_remote(path):
        return pa.memory_map(path)
    return pa.PythonFile(storage.open_read(path), mode="r")


class _HashedSource:
    """A shard's bytes for ``pa.ipc.open_stream`` that feed ``digest`` as they are consumed.

    Local: the memory map, read zero-copy through a ``BufferReader``; ``advance`` hashes up to
    the reader's position after each message, i.e. the pages the decoder just touched, not a
    second read of the file. Remote: the storage stream, hashed in ``read``. ``finish`` hashes
    what follows the last message (the end marker, and anything appended), so the digest
    covers the whole file."""

    def __init__(self, path: str, digest: Any) -> None:
        self.digest = digest
        self._map: Any = None
        self._raw: Any = None
        self._hashed = 0
        if storage.is_remote(path):
            self._raw = storage.open_read(path)
            self.source: Any = pa.PythonFile(_HashingReader(self._raw, digest), mode="r")
        else:
            self._map = pa.memory_map(path)
            self._buffer = self._map.read_buffer()
            self.source = pa.BufferReader(self._buffer)

    def advance(self) -> None:
        """Hash the bytes read so far (local; a remote stream hashes as it goes)."""
        if self._map is not None:
            position = self.source.tell()
            if position > self._hashed:
                self.digest.update(memoryview(self._buffer)[self._hashed : position])
                self._hashed = position

    def finish(self) -> None:
        if self._map is not None:
            self.source.seek(0, 2)
            self.advance()
        else:
            while self.source.read(_READ_CHUNK):
                pass

    def __enter__(self) -> _HashedSource:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.source.close()
        for f in (self._map, self._raw):
            if f is not None:
                f.close()


_READ_CHUNK = 1 << 20


class _HashingReader(io.RawIOBase):
    """A read-only file that sha256-hashes the bytes read from ``raw`` (a remote shard)."""

    def __init__(self, raw: Any, digest: Any) -> None:
        self.raw = raw
        self.digest = digest

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n) if n is not None and n >= 0 else self.raw.read()
        self.digest.update(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


def column_numpy(batch: pa.RecordBatch, entry: Mapping[str, Any]) -> np.ndarray:
    """A column of a batch as a (rows, length) numpy array (zero-copy when uncompressed)."""
    col = batch.column(entry["name"])
    if "length" in entry:
        return numpy_view(col.flatten(), numpy_dtype(entry)).reshape(-1, entry["length"])
    return numpy_view(col, numpy_dtype(entry))


def numpy_view(arr: pa.Array, dtype: np.dtype) -> np.ndarray:
    """A numeric Arrow array as numpy, over its memory when it has no nulls and ``dtype``'s
    width. Why not ``to_numpy``: its first call in a process imports pandas (≈ 0.2 CPU-s)."""
    dtype = np.dtype(dtype)
    if arr.null_count or getattr(arr.type, "bit_width", 0) != dtype.itemsize * 8:
        return arr.to_numpy(zero_copy_only=False)
    data = arr.buffers()[1]
    if data is None:  # an empty array may have no data buffer
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)


def _schema_text(schema: pa.Schema) -> str:
    return (
        "{"
        + ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema)
        + "}"
    )
