"""Supervised tasks as training shards: ``c4forge shards task NAME --vocab V -o DIR``.

T5 trains on supervised tasks the way it trains on C4 (§3.5.2–3.5.3): each example becomes a
text-to-text pair, the input with the task's prefix and field names and the target the label
word (finetune.md §4: ``sst2 sentence: … → positive``; STS-B's score rounded to 0.2), and short
pairs are packed several to a row with segment ids, exactly like ``--packing per_document``
pretraining rows (objectives.md §5.2). The result is a shard set like any other (formats.md §3:
index.json, the vocabulary copy, ``shards verify``), so ``c4forge train`` mixes it with C4.

Tasks are small (GLUE's largest train split has 400k rows), so this writes in one process with
the shard writer of ``c4forge.formats.shards``; no Beam job. A GLUE task reads its GLUE-layout
folder (``train.tsv`` → train, the first dev split → validation); ``custom`` reads the user's
``.tsv``/``.csv``/``.jsonl`` with an input and a target field (``--data`` train,
``--validation-data`` optional), taken verbatim.

Order: examples are shuffled by ``(seed, split)`` before packing (a file sorted by label would
otherwise make one-label rows), then each row goes to shard ``key % count`` with ``key`` a 64-bit
hash of ``(seed, task, split, first example)``, sorted by key inside a shard (formats.md §3.1).
Inputs longer than the row lose their tail before EOS and are counted (``inputs_truncated``);
so do targets.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4forge import __version__
from c4forge.data import BUNDLED_GLUE
from c4forge.errors import ConfigError, InputError, OutputExistsError
from c4forge.formats import shards as fmt
from c4forge.io import storage

OBJECTIVE = "text_to_text"
_SHUFFLE_TAG = 0x5441_534B  # "TASK"


@dataclass(frozen=True)
class TaskShardsRequest:
    """One task shard build, as asked for on the command line."""

    task: str
    vocab: str
    output: str
    data: str | None = None  # GLUE folder (default: the bundled one) or the custom train file
    validation_data: str | None = None  # custom only
    input_field: str = "input"
    target_field: str = "target"
    inputs_length: int = 512
    targets_length: int = 114
    pack_window: int = 512
    num_shards: dict[str, int | None] | None = None
    seed: int = 0
    batch_rows: int = 1024
    token_dtype: str = "auto"
    extra_ids: int | None = None
    overwrite: bool = False
    quiet: bool = False


@dataclass(frozen=True)
class TaskPairs:
    """The text-to-text pairs of one split, and where they came from."""

    inputs: list[str]
    targets: list[str]
    file: str


def glue_pairs(task: str, data: str | None) -> tuple[dict[str, TaskPairs], list[str] | None]:
    """(train / validation pairs, the label words) of a GLUE task (finetune.md §4 formats)."""
    from c4forge.glue.formats import t5_input, t5_target
    from c4forge.glue.tasks import get_task, load_glue, split_file

    spec = get_task(task)
    folder = data or BUNDLED_GLUE
    out = {}
    for split, name in (("train", "train"), ("validation", spec.dev_splits[0])):
        try:
            path = split_file(spec, folder, name)
        except InputError:
            if split == "train":
                raise
            continue  # no dev file: a train-only set
        examples = load_glue(spec, path)
        out[split] = TaskPairs(
            [t5_input(spec, ex) for ex in examples],
            [t5_target(spec, ex.label) for ex in examples],
            path,
        )
    words = None if spec.target_words is None else list(spec.target_words)
    return out, words


def custom_pairs(req: TaskShardsRequest) -> dict[str, TaskPairs]:
    """Input/target pairs of the user's own files, fields taken verbatim."""
    from c4forge.glue.tasks import table_rows

    if not req.data:
        raise ConfigError("shards task custom needs --data FILE (.tsv, .csv or .jsonl)")
    out = {}
    for split, path in (("train", req.data), ("validation", req.validation_data)):
        if path is None:
            continue
        ins, tgs = [], []
        for line, rec in table_rows(path):
            for name in (req.input_field, req.target_field):
                if name not in rec:
                    raise InputError(f"{path}:{line}: no field {name!r} (has {', '.join(rec)})")
                if not str(rec[name]).strip():
                    raise InputError(f"{path}:{line}: field {name!r} is empty")
            ins.append(str(rec[req.input_field]))
            tgs.append(str(rec[req.target_field]))
        if not ins:
            raise InputError(f"{path}: no rows")
        out[split] = TaskPairs(ins, tgs, path)
    return out


def encode_pairs(
    pairs: TaskPairs, vocab: Any, inputs_length: int, targets_length: int
) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, int]]:
    """Token ids + EOS, cut to the row lengths (seqio's trim-then-EOS), with the cuts counted."""
    eos = vocab.eos_id
    counts = {"inputs_truncated": 0, "targets_truncated": 0}
    sides = []
    for texts, length, key in (
        (pairs.inputs, inputs_length, "inputs_truncated"),
        (pairs.targets, targets_length, "targets_truncated"),
    ):
        ids = vocab.encode_arrays(texts)
        counts[key] = sum(len(a) > length - 1 for a in ids)
        # the row length that would keep every one whole (EOS included): for the warning
        counts[key.replace("truncated", "longest")] = max((len(a) + 1 for a in ids), default=0)
        sides.append([np.append(a[: length - 1], eos).astype(np.int64) for a in ids])
    return sides[0], sides[1], counts


def row_keys(seed: int, task: str, split: str, first: np.ndarray) -> np.ndarray:
    """64-bit key of each row from its first example (shard = key % count, sorted inside)."""
    out = np.empty(len(first), np.uint64)
    for i, ex in enumerate(first.tolist()):
        digest = hashlib.blake2b(f"{seed}:{task}:{split}:{ex}".encode(), digest_size=8)
        out[i] = int.from_bytes(digest.digest(), "little")
    return out


def build_task_shards(
    req: TaskShardsRequest, longest: dict[str, dict[str, int]] | None = None
) -> dict[str, Any]:
    """Write the task's shard set (see the module docstring); returns its index.json.
    ``longest``, when given, receives per split the row lengths that would keep every input and
    target whole (``{"train": {"inputs": 230, "targets": 3}}``; not in index.json, whose bytes
    stay as they were; nothing for a set found already built)."""
    from c4forge.formats.shards import write_vocab_copy
    from c4forge.objectives.packing import pack_arrays
    from c4forge.vocab.vocab import Vocabulary
    from c4forge.vocab.vocab_files import source_files

    task = req.task.lower()
    for name, value in (
        ("--inputs-length", req.inputs_length),
        ("--targets-length", req.targets_length),
        ("--pack-window", req.pack_window),
        ("--batch-rows", req.batch_rows),
    ):
        least = 2 if "length" in name else 1  # a row holds at least one token and EOS
        if value < least:
            raise ConfigError(f"{name} must be at least {least}, got {value}")
    if task == "custom":
        pairs, words = custom_pairs(req), None
    else:
        if req.validation_data or req.input_field != "input" or req.target_field != "target":
            raise ConfigError(
                "--validation-data, --input-field and --target-field are for `shards task custom`"
            )
        pairs, words = glue_pairs(task, req.data)
    vocab = Vocabulary.load(req.vocab, extra_ids=req.extra_ids)
    vocabulary = vocab.descriptor()
    token_dtype = fmt.choose_token_dtype(vocab.embedding_size, req.token_dtype)
    spec = fmt.column_layout(
        "encoder_decoder", "per_document", req.inputs_length, req.targets_length, token_dtype
    )
    objective = {
        "name": OBJECTIVE,
        "task": task,
        "inputs_length": req.inputs_length,
        "targets_length": req.targets_length,
        "packing": "per_document",
        "pack_window": req.pack_window,
        "label_words": words,
    }
    source = {
        "task": task,
        "files": {
            s: {"file": os.path.basename(p.file), "sha256": storage.sha256(p.file)}
            for s, p in pairs.items()
        },
        "examples": {s: len(p.inputs) for s, p in pairs.items()},
    }
    manifest = fmt.make_manifest(
        objective=objective,
        schema=spec,
        seed=req.seed,
        source=source,
        token_dtype=token_dtype,
        vocabulary=vocabulary,
        batch_rows=req.batch_rows,
        compression=None,
        created_by=f"c4forge {__version__}",
    )
    if _already_built(req, manifest):
        return storage.read_json(storage.join(req.output, fmt.INDEX_NAME))
    os.makedirs(req.output, exist_ok=True)
    np_dtype = np.dtype(token_dtype)
    splits, stats = {}, {}
    for split_no, (split, p) in enumerate(pairs.items()):
        ins, tgs, counts = encode_pairs(p, vocab, req.inputs_length, req.targets_length)
        lengths = {side: counts.pop(f"{side}_longest") for side in ("inputs", "targets")}
        if longest is not None:
            longest[split] = lengths
        perm = np.random.default_rng([req.seed, _SHUFFLE_TAG, split_no]).permutation(len(ins))
        packed = pack_arrays(
            [ins[i] for i in perm],
            [tgs[i] for i in perm],
            req.inputs_length,
            req.targets_length,
            window=req.pack_window,
            dtype=np_dtype,
        )
        keys = row_keys(req.seed, task, split, perm[packed.first_example])
        count = (req.num_shards or {}).get(split) or 1
        records = []
        for i in range(count):
            sel = np.flatnonzero(keys % np.uint64(count) == i)
            sel = sel[np.argsort(keys[sel], kind="stable")]
            meta = fmt.shard_metadata(
                manifest["dataset_fingerprint"], vocabulary["sha256"], split, i, count
            )
            path = storage.join(req.output, fmt.shard_file_name(split, i, count))
            cols = {k: v[sel] for k, v in packed.columns.items()}
            records.append(fmt.write_shard(path, spec, cols, meta, batch_rows=req.batch_rows))
        splits[split] = fmt.split_summary(count, records)
        stats[split] = {
            "documents": len(ins),
            "examples": len(ins),
            "rows": packed.num_rows,
            "documents_empty": 0,
            "too_many_spans": 0,
            **counts,
        }
    index = dict(manifest)
    index["splits"] = splits
    index["stats"] = stats
    index["versions"] = fmt.library_versions()
    index[fmt.VOCAB_INDEX_KEY] = write_vocab_copy(
        req.output, source_files(vocab, req.vocab), vocabulary
    )
    fmt.write_index(req.output, index)
    return index


def _already_built(req: TaskShardsRequest, manifest: dict[str, Any]) -> bool:
    """A finished set with this fingerprint is kept; another one needs --overwrite."""
    index_path = storage.join(req.output, fmt.INDEX_NAME)
    if not storage.exists(index_path):
        return False
    found = storage.read_json(index_path).get("dataset_fingerprint")
    if found == manifest["dataset_fingerprint"]:
        return True
    if not req.overwrite:
        raise OutputExistsError(
            f"{index_path} holds a shard set built differently (dataset_fingerprint {found}, "
            f"this run {manifest['dataset_fingerprint']}); pass --overwrite to replace it"
        )
    from c4forge.shards.output import remove_previous

    remove_previous(req.output)
    return False


# ----------------------------------------------------------------------------- the command


def task_flags() -> list[Any]:
    """The flags only `shards task` reads (CLI-only dests, listed after the build's own)."""
    from c4forge.cliconfig import flag

    return [
        flag(
            "--data",
            default=None,
            help="shards task: GLUE-layout folder (default: the bundled GLUE files), or custom's "
            "train file",
        ),
        flag("--validation-data", default=None, help="shards task custom: the validation file"),
        flag("--input-field", default="input", help="shards task custom: the input text field"),
        flag("--target-field", default="target", help="shards task custom: the target field"),
    ]


def task_command(args: Any, extra: Sequence[str]) -> int:
    """``c4forge shards task NAME …``: build, then one summary block."""
    from c4forge.shards.job import parse_num_shards

    if len(args.target) != 2:
        raise ConfigError("usage: c4forge shards task NAME --vocab VOCAB --output DIR [options]")
    if extra:
        raise ConfigError(f"unrecognized arguments for 'shards task': {' '.join(extra)}")
    if not args.vocab:
        raise ConfigError("--vocab is required (a `c4forge vocab` folder or a .model file)")
    if not args.output:
        raise ConfigError("--output is required")
    if args.objective != "span_corruption":
        raise ConfigError("shards task writes text-to-text rows: --objective does not apply")
    req = TaskShardsRequest(
        task=args.target[1],
        vocab=args.vocab,
        output=args.output,
        data=args.data,
        validation_data=args.validation_data,
        input_field=args.input_field,
        target_field=args.target_field,
        inputs_length=args.inputs_length or 512,
        targets_length=args.targets_length or 114,
        pack_window=args.pack_window,
        num_shards=parse_num_shards(args.num_shards),
        seed=args.seed,
        batch_rows=args.batch_rows,
        token_dtype=args.token_dtype,
        extra_ids=args.extra_ids,
        overwrite=args.overwrite,
        quiet=args.quiet,
    )
    from c4forge.shards.command import run

    result = run(req)
    if not req.quiet:
        print(result.text(), file=sys.stdout)
    for line in result.truncated:  # a cut input changes what the model sees: said even with --quiet
        print(f"c4forge shards task: warning: {line}", file=sys.stderr)
    return 0


def truncation_lines(index: dict[str, Any], longest: dict[str, dict[str, int]]) -> list[str]:
    """One line per side whose examples lost their tail: how many of how many, per split, and
    the row length that keeps every one whole (measured on this build's tokens)."""
    obj, stats = index["objective"], index.get("stats", {})
    lines = []
    for side, flag in (("inputs", "--inputs-length"), ("targets", "--targets-length")):
        length = obj[f"{side}_length"]
        key = f"{side}_truncated"
        cut = {split: st for split, st in stats.items() if st.get(key)}
        if not cut:
            continue
        where = " and ".join(
            f"{st[key]:,} of {st['examples']:,} {split} {side} "
            f"({st[key] / max(1, st['examples']):.1%})"
            for split, st in cut.items()
        )
        need = max((v[side] for v in longest.values()), default=0)
        fit = f"; {flag} {need} keeps every one whole" if need > length else ""
        lines.append(f"{where} are longer than {flag} {length} and lost their tail{fit}")
    return lines
