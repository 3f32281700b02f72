"""Train a T5-style SentencePiece vocabulary from clean documents (objectives.md §1).

Why sample ourselves: SentencePiece's reservoir sample depends on input order; ours keeps a line
iff md5(f"{seed}:{url}:{line_index}") falls under a threshold, so the sample is the same
whatever the shard order or count, and sorting kept lines by that hash fixes the order the
trainer sees (same order + same num_threads = byte-identical model).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from c4forge import __version__
from c4forge.errors import ConfigError, InputError, OutputExistsError
from c4forge.formats import clean_docs
from c4forge.io import ownership, tempdirs
from c4forge.io.storage import check_output_folder, sha256, write_bytes, write_json

if TYPE_CHECKING:
    from c4forge.vocab.options import VocabOptions
from c4forge.proctree import available_memory
from c4forge.vocab.memory import TYPICAL_LINE_CHARS, Need, check_fits, fit_text, gb
from c4forge.vocab.train_progress import TrainerProgress, log_path_in
from c4forge.vocab.vocab import (
    DEFAULT_EXTRA_IDS,
    DESCRIPTOR_FILE,
    EXTRA_IDS_MODEL_FILE,
    MODEL_FILE,
    VOCAB_FORMAT,
    add_extra_ids,
    round_embedding_size,
)

MAX_SENTENCE_BYTES = 4192
# The default sample (objectives.md §1.4): sized by the trainer's measured memory fit
# (``memory.py``) so that a default run stays under 3 GB on any corpus. The line budget binds
# only on text whose lines average under 20 characters (C4's average ≈ 240).
DEFAULT_SAMPLE_CHARS = 100_000_000
DEFAULT_SAMPLE_SENTENCES = DEFAULT_SAMPLE_CHARS // 20
HASH_SPACE = 1 << 128

# T5's trainer configuration (objectives.md §1.3). num_threads is part of it: it changes the model.
T5_TRAINER_OPTIONS: dict[str, Any] = {
    "model_type": "unigram",
    "character_coverage": 0.9995,
    "pad_id": 0,
    "eos_id": 1,
    "unk_id": 2,
    "bos_id": -1,
    "pad_piece": "<pad>",
    "eos_piece": "</s>",
    "unk_piece": "<unk>",
    "normalization_rule_name": "nmt_nfkc",
    "add_dummy_prefix": True,
    "remove_extra_whitespaces": True,
    "shuffle_input_sentence": True,
    "seed_sentencepiece_size": 1_000_000,
    "shrinking_factor": 0.75,
    "num_sub_iterations": 2,
    "max_sentencepiece_length": 16,
    "max_sentence_length": MAX_SENTENCE_BYTES,
    "split_by_unicode_script": True,
    "split_by_whitespace": True,
    "split_by_number": True,
    "treat_whitespace_as_suffix": False,
    "split_digits": False,
    "byte_fallback": False,
    "hard_vocab_limit": True,
    "num_threads": 16,
    "train_extremely_large_corpus": False,
}


@dataclass(frozen=True)
class Source:
    """One folder of clean documents and its share of the sample (`--mix`)."""

    language: str
    directory: str
    weight: float = 1.0


def parse_mix(spec: str, default_dir: str | None) -> list[Source]:
    """`en=10,de=1:DIR_DE,...` → sources. An entry without `:DIR` uses the positional DOCS folder."""
    sources: list[Source] = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        m = re.fullmatch(r"([A-Za-z][A-Za-z0-9_-]*)=([0-9.]+)(?::(.+))?", entry)
        if not m:
            raise ConfigError(f"--mix entry {entry!r}: expected LANG=WEIGHT or LANG=WEIGHT:DIR")
        lang, weight_s, directory = m.group(1), m.group(2), m.group(3)
        try:
            weight = float(weight_s)
        except ValueError:
            raise ConfigError(
                f"--mix entry {entry!r}: weight {weight_s!r} is not a number"
            ) from None
        if weight <= 0:
            raise ConfigError(f"--mix entry {entry!r}: weight must be > 0")
        if directory is None:
            if default_dir is None:
                raise ConfigError(
                    f"--mix entry {entry!r} names no folder and no DOCS folder was given"
                )
            directory = default_dir
        if any(s.language == lang for s in sources):
            raise ConfigError(f"--mix names language {lang!r} twice")
        sources.append(Source(lang, directory, weight))
    if not sources:
        raise ConfigError("--mix is empty")
    dirs = [s.directory for s in sources]
    if len(set(dirs)) != len(dirs):
        raise ConfigError(
            "--mix: two languages share one folder; give each language its own folder"
        )
    return sources


@dataclass
class SampleStats:
    """Counts of the sampling pass; they go into vocab.json."""

    files: int = 0
    documents: int = 0
    documents_empty: int = 0
    candidate_lines: int = 0
    candidate_chars: int = 0
    lines_too_long: int = 0
    lines_empty: int = 0
    lines: int = 0
    characters: int = 0
    per_source: dict[str, dict[str, Any]] = field(default_factory=dict)


def _train_files(source: Source) -> list[str]:
    path = source.directory
    if os.path.isfile(path):  # a single document file (e.g. the bundled sample) is accepted as is
        return [path]
    files = clean_docs.list_clean_shards(path, "train")
    if not files:
        others = (
            sorted(n for n in os.listdir(path) if n.startswith("c4-"))
            if os.path.isdir(path)
            else []
        )
        hint = (
            f"; found {', '.join(others[:3])}: pass one such file itself to train on it"
            if others
            else ""
        )
        raise InputError(
            f"{path}: no train documents (expected c4-train.NNNNN-of-NNNNN.json.gz or .parquet files, "
            f"as written by `c4forge clean` or the AllenAI C4 release){hint}"
        )
    return files


def _count_chars(files: list[str]) -> int:
    return sum(len(doc["text"]) for path in files for doc in clean_docs.iter_documents(path))


def line_hash(seed: int, url: str, line_index: int) -> bytes:
    """md5(f"{seed}:{url}:{line_index}") — 16 big-endian bytes, so byte order = integer order."""
    return hashlib.md5(f"{seed}:{url}:{line_index}".encode()).digest()


def sample_lines(
    sources: list[Source],
    *,
    seed: int,
    sample_chars: int | None,
    progress: bool = True,
    sample_sentences: int | None = None,
) -> tuple[list[str], SampleStats, dict[str, Any]]:
    """The training lines, sorted by hash, plus stats and a description of the sources.

    Two budgets, split between sources by weight: ``sample_chars`` keeps a line iff its hash
    falls under ``2^128 × share / total_chars`` (objectives.md §1.4); ``sample_sentences`` (a
    line budget, ``--sample-sentences``) keeps the lines with the smallest hashes,
    at most ``share`` of them, through a bounded heap. Both depend on hashes only, so the
    sample is order-independent; with both, the line budget applies to the character sample.
    ``sample_chars=None`` means no character budget.
    """
    import heapq

    from c4forge.progress import progress as progress_display

    stats = SampleStats()
    total_weight = sum(s.weight for s in sources)
    kept: list[tuple[bytes, str]] = []
    described: list[dict[str, Any]] = []
    for source in sources:
        files = _train_files(source)
        cstats = (
            None if os.path.isfile(source.directory) else clean_docs.clean_stats(source.directory)
        )
        total_chars = clean_docs.split_characters(cstats, "train")
        counted = total_chars is None and sample_chars is not None
        if counted:
            total_chars = _count_chars(files)
        if sample_chars is None:
            fraction = 1.0
        else:
            share = sample_chars * source.weight / total_weight
            fraction = 1.0 if total_chars == 0 else min(1.0, share / total_chars)
        # Max-heap (negated hash) of the line budget's current picks; None = no line budget.
        budget = (
            None
            if sample_sentences is None
            else max(1, round(sample_sentences * source.weight / total_weight))
        )
        picked: list[tuple[int, str]] = []
        # Threshold as an exact integer: hash < 2^128 * fraction (fraction as a float64 ratio).
        threshold = HASH_SPACE if fraction >= 1.0 else int(HASH_SPACE * fraction)
        src_stats = {"documents": 0, "lines": 0, "characters": 0, "lines_too_long": 0}
        docs_total = clean_docs.split_documents(cstats, "train")
        bar = progress_display(
            total=docs_total,
            desc=f"sampling {source.language}",
            unit=" docs",
            disable=not progress,
            file=sys.stderr,
        )
        for path in files:
            stats.files += 1
            for doc in clean_docs.iter_documents(path):
                bar.update(1)
                stats.documents += 1
                src_stats["documents"] += 1
                text, url = doc["text"], doc["url"]
                if not text.strip():
                    stats.documents_empty += 1
                    continue
                for index, line in enumerate(text.split("\n")):
                    if not line.strip():
                        stats.lines_empty += 1
                        continue
                    stats.candidate_lines += 1
                    if len(line.encode("utf-8")) > MAX_SENTENCE_BYTES:
                        stats.lines_too_long += 1  # the trainer would skip it; count it instead
                        src_stats["lines_too_long"] += 1
                        continue
                    stats.candidate_chars += len(line)
                    h = line_hash(seed, url, index)
                    if threshold == HASH_SPACE or int.from_bytes(h, "big") < threshold:
                        if budget is None:
                            kept.append((h, line))
                            src_stats["lines"] += 1
                            src_stats["characters"] += len(line)
                        elif len(picked) < budget:
                            heapq.heappush(picked, (-int.from_bytes(h, "big"), line))
                        elif -int.from_bytes(h, "big") > picked[0][0]:
                            heapq.heapreplace(picked, (-int.from_bytes(h, "big"), line))
        bar.close()
        for neg, line in picked:
            kept.append(((-neg).to_bytes(16, "big"), line))
            src_stats["lines"] += 1
            src_stats["characters"] += len(line)
        stats.per_source[source.language] = src_stats
        described.append(
            {
                "language": source.language,
                "weight": source.weight,
                "files": [os.path.basename(f) for f in files],
                "total_chars": total_chars,
                "total_chars_counted": counted,
                "fraction": fraction,
                "clean_stats_sha256": None
                if cstats is None
                else sha256(clean_docs.clean_stats_path(source.directory)),
            }
        )
    if stats.documents == 0:
        raise InputError(
            "the documents folder(s) hold no documents: " + ", ".join(s.directory for s in sources)
        )
    kept.sort()
    lines = [line for _, line in kept]
    stats.lines = len(lines)
    stats.characters = sum(len(x) for x in lines)
    if not lines:
        raise InputError(
            "no usable text: every document is empty or every line exceeds "
            f"{MAX_SENTENCE_BYTES} bytes ({stats.documents} documents read)"
        )
    return lines, stats, {"sources": described}


def expected_need(
    sources: list[Source], sample_chars: int | None, sample_sentences: int | None
) -> Need:
    """The sample's expected size, from the budgets and each source's stats.json (no reading of
    documents): a bound where a source's size is not recorded (a single file, AllenAI C4)."""
    total_weight = sum(s.weight for s in sources)
    chars = lines = 0
    bound = False
    for source in sources:
        share = source.weight / total_weight
        cstats = (
            None if os.path.isfile(source.directory) else clean_docs.clean_stats(source.directory)
        )
        total = clean_docs.split_characters(cstats, "train")
        budget = None if sample_sentences is None else max(1, round(sample_sentences * share))
        if sample_chars is not None:
            c = (
                int(sample_chars * share)
                if total is None
                else min(int(sample_chars * share), total)
            )
        elif total is not None:
            c = total
        else:  # a pure line budget on a source of unknown size: lines of the longest kind kept
            c = (budget or 0) * MAX_SENTENCE_BYTES
        n = -(-c // TYPICAL_LINE_CHARS)
        if budget is not None and n > budget:
            n = budget
        bound = bound or total is None
        chars += c
        lines += n
    return Need(chars, lines, bound)


def need_line(
    need: Need, have: int | None, sample_chars: int | None, sample_sentences: int | None
) -> str:
    """The run's first line: what the sample and SentencePiece's trainer will need."""
    budgets = []
    if sample_chars is not None:
        budgets.append(f"--sample-chars {sample_chars:,}")
    if sample_sentences is not None:
        budgets.append(f"--sample-sentences {sample_sentences:,}")
    about = "at most" if need.bound else "≈"
    avail = "" if have is None else f"; {gb(have)} available"
    return (
        f"vocab: sample {about} {need.chars:,} characters ({', '.join(budgets)}): training needs "
        f"{about} {gb(need.peak_bytes)} of memory (peak PSS; measured fit {fit_text()}){avail}"
    )


def trainer_options(
    vocab_size: int,
    *,
    character_coverage: float = 0.9995,
    byte_fallback: bool = False,
    num_threads: int = 16,
    input_sentence_size: int = 0,
) -> dict[str, Any]:
    opts = dict(T5_TRAINER_OPTIONS)
    opts.update(
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        num_threads=num_threads,
        input_sentence_size=input_sentence_size,
    )
    return opts


_TOO_HIGH = re.compile(
    r"Vocabulary size (?:is )?too high \((\d+)\)\. Please set it to a value <= (\d+)"
)
_TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


@contextlib.contextmanager
def native_log_to(path: str | None) -> Iterator[None]:
    """Send what C++ code writes to file descriptor 2 (SentencePiece's trainer log) to ``path``
    for the duration; None: to wherever ``sys.stderr`` writes (a log file when the caller
    redirected it: `c4forge experiment`'s stage log), else leave fd 2 alone.

    Why not SentencePiece's own ``logstream``: it redirects ``sys.stderr.fileno()``, which
    under ``contextlib.redirect_stderr`` is the log file's descriptor, not 2, so the trainer's
    ~80 lines reached the terminal in the middle of `c4forge experiment`'s stage list."""
    target: int | None = None
    opened = None
    if path is not None:
        opened = open(path, "wb")  # noqa: SIM115 - closed below
        target = opened.fileno()
    else:
        try:
            target = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):  # pytest's capture: no descriptor
            target = None
        if target == 2:
            target = None
    try:
        saved = os.dup(2) if target is not None else None
    except OSError:
        saved = None
    try:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(target, 2)
        yield
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
        if opened is not None:
            opened.close()


def train_model(
    lines: list[str], options: dict[str, Any], *, verbose: bool = False, progress: bool = False
) -> bytes:
    """Run SentencePiece on `lines` (in this order); SentencePiece errors become ConfigErrors.
    With ``progress`` (and not ``verbose``, which shows the log itself) the trainer's hidden log
    feeds a progress display (``train_progress``)."""
    import io

    import sentencepiece as spm

    sink = io.BytesIO()
    log_dir = tempdirs.make("c4forge-spm-log-") if progress and not verbose else None
    try:
        if log_dir is None:
            with native_log_to(None if verbose else os.devnull):
                spm.SentencePieceTrainer.Train(
                    sentence_iterator=iter(lines), model_writer=sink, **options
                )
        else:
            log_path = log_path_in(log_dir)
            # the display first: it keeps the terminal's descriptor before the log takes fd 2
            with (
                TrainerProgress(log_path, int(options["vocab_size"])),
                native_log_to(log_path),
            ):
                spm.SentencePieceTrainer.Train(
                    sentence_iterator=iter(lines), model_writer=sink, **options
                )
    except RuntimeError as err:
        msg = str(err)
        if m := _TOO_HIGH.search(msg):
            raise ConfigError(
                f"--vocab-size {m.group(1)} is too large for this text: SentencePiece found at most "
                f"{m.group(2)} pieces. Use --vocab-size {m.group(2)} or less, or sample more text "
                f"(--sample-chars)"
            ) from None
        if m := _TOO_SMALL.search(msg):
            raise ConfigError(
                f"--vocab-size {options['vocab_size']} is too small: the text needs {m.group(2)} "
                f"characters as pieces at --character-coverage {options['character_coverage']}; use "
                f"--vocab-size {int(m.group(2)) + 1} or more, or lower --character-coverage"
            ) from None
        raise ConfigError(f"SentencePiece training failed: {msg}") from None
    finally:
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)
    return sink.getvalue()


def vocab_from_options(opts: VocabOptions) -> dict[str, Any]:
    """``build_vocab`` for a `c4forge vocab` request: its corpus (DOCS or ``--mix``) and sample
    budget (``--sample-sentences`` alone is a pure line budget; otherwise the character budget
    applies). Returns vocab.json's content."""
    sample_chars, sample_sentences = opts.sample_chars, opts.sample_sentences
    if sample_chars is None and sample_sentences is None:
        sample_chars, sample_sentences = DEFAULT_SAMPLE_CHARS, DEFAULT_SAMPLE_SENTENCES
    if opts.mix:
        sources = parse_mix(opts.mix, opts.docs)
    elif opts.docs:
        sources = [Source("en", opts.docs, 1.0)]
    else:
        raise ConfigError("give a DOCS folder, or --mix LANG=W:DIR,...")
    return build_vocab(
        sources,
        opts.output,
        vocab_size=opts.vocab_size,
        seed=opts.seed,
        sample_chars=sample_chars,
        sample_sentences=sample_sentences,
        extra_ids=opts.extra_ids,
        byte_fallback=opts.byte_fallback,
        character_coverage=opts.character_coverage,
        num_threads=opts.num_threads,
        overwrite=opts.overwrite,
        progress=not opts.quiet,
        verbose=opts.verbose,
    )


@ownership.owns_output("vocab", lambda sources, output, **_: output)
def build_vocab(
    sources: list[Source],
    output: str,
    *,
    vocab_size: int,
    seed: int = 0,
    sample_chars: int | None = DEFAULT_SAMPLE_CHARS,
    sample_sentences: int | None = None,
    extra_ids: int = DEFAULT_EXTRA_IDS,
    byte_fallback: bool = False,
    character_coverage: float = 0.9995,
    num_threads: int = 16,
    overwrite: bool = False,
    progress: bool = True,
    verbose: bool = False,
) -> dict[str, Any]:
    """Sample, train, write the two models and vocab.json (last). Returns vocab.json's content."""
    _check_options(
        vocab_size, extra_ids, byte_fallback, character_coverage, num_threads, sample_chars
    )
    if sample_sentences is not None and sample_sentences < 1:
        raise ConfigError(f"--sample-sentences must be >= 1, got {sample_sentences}")
    desc_path = os.path.join(output, DESCRIPTOR_FILE)
    if os.path.exists(desc_path) and not overwrite:
        raise OutputExistsError(
            f"{output} already holds a vocabulary ({DESCRIPTOR_FILE}); pass --overwrite"
        )
    check_output_folder(output)  # a file or read-only folder fails now, not after training
    if progress:  # a bad progress setting stops the run with its one line, before any other
        from c4forge.progress import line_every_seconds

        line_every_seconds()
    started = time.monotonic()
    need = expected_need(sources, sample_chars, sample_sentences)
    have = available_memory()
    if progress:
        print(need_line(need, have, sample_chars, sample_sentences), file=sys.stderr, flush=True)
    check_fits(need, have, what="this sample")
    lines, stats, source_desc = sample_lines(
        sources,
        seed=seed,
        sample_chars=sample_chars,
        progress=progress,
        sample_sentences=sample_sentences,
    )
    drawn = Need(stats.characters, stats.lines)
    if progress:
        print(
            f"vocab: sampled {stats.lines:,} lines, {stats.characters:,} characters; "
            f"training needs ≈ {gb(drawn.peak_bytes)}",
            file=sys.stderr,
            flush=True,
        )
    check_fits(drawn, available_memory(), what="the drawn sample")
    options = trainer_options(
        vocab_size,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        num_threads=num_threads,
        input_sentence_size=len(lines),
    )
    sampled = time.monotonic()
    proto = train_model(lines, options, verbose=verbose, progress=progress)
    os.makedirs(output, exist_ok=True)
    if os.path.exists(desc_path):  # --overwrite: the folder is incomplete until vocab.json is back
        os.remove(desc_path)
    write_bytes(os.path.join(output, MODEL_FILE), proto)
    write_bytes(os.path.join(output, EXTRA_IDS_MODEL_FILE), add_extra_ids(proto, extra_ids))
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(proto)
    num_pieces = sp.GetPieceSize()
    v = num_pieces + extra_ids
    desc = {
        "format": VOCAB_FORMAT,
        "format_version": 1,
        "created_by": f"c4forge {__version__}",
        "sha256": hashlib.sha256(proto).hexdigest(),
        "extra_ids_model_sha256": hashlib.sha256(add_extra_ids(proto, extra_ids)).hexdigest(),
        "num_pieces": num_pieces,
        "extra_ids": extra_ids,
        "vocab_size": v,
        "embedding_size": round_embedding_size(v),
        "pad_id": 0,
        "eos_id": 1,
        "unk_id": 2,
        "bos_id": -1,
        "trainer": options,
        "sample": {
            "seed": seed,
            "sample_chars": sample_chars,
            "sample_sentences": sample_sentences,
            "hash": "md5(f'{seed}:{url}:{line_index}')",
            "files": stats.files,
            "documents": stats.documents,
            "documents_empty": stats.documents_empty,
            "candidate_lines": stats.candidate_lines,
            "candidate_chars": stats.candidate_chars,
            "lines_empty": stats.lines_empty,
            "lines_too_long": stats.lines_too_long,
            "lines": stats.lines,
            "characters": stats.characters,
            "per_source": stats.per_source,
        },
        "source": source_desc,
        "versions": {"sentencepiece": spm.__version__},
    }
    # Single-source runs also expose the clean stats hash at the top of `source` (formats.md §2).
    desc["source"]["clean_stats_sha256"] = (
        source_desc["sources"][0]["clean_stats_sha256"] if len(sources) == 1 else None
    )
    write_json(desc_path, desc)
    desc["_timing"] = {"sample_s": sampled - started, "train_s": time.monotonic() - sampled}
    return desc


def _check_options(
    vocab_size: int,
    extra_ids: int,
    byte_fallback: bool,
    coverage: float,
    num_threads: int,
    sample_chars: int | None,
) -> None:
    # 3 specials + at least one learned piece; byte fallback needs its 256 <0xNN> pieces on top.
    minimum = 4 + (256 if byte_fallback else 0)
    if vocab_size < minimum:
        raise ConfigError(
            f"--vocab-size {vocab_size} leaves no room for learned pieces "
            f"(minimum {minimum}{' with --byte-fallback' if byte_fallback else ''})"
        )
    if not 0 <= extra_ids <= 1000:
        raise ConfigError(f"--extra-ids must be in 0..1000, got {extra_ids}")
    if vocab_size + extra_ids > 2**31 - 1:
        raise ConfigError("--vocab-size plus --extra-ids does not fit 32-bit token ids")
    if not 0.0 < coverage <= 1.0:
        raise ConfigError(f"--character-coverage must be in (0, 1], got {coverage}")
    if num_threads < 1:
        raise ConfigError("--num-threads must be >= 1")
    if sample_chars is not None and sample_chars < 1:
        raise ConfigError("--sample-chars must be >= 1")


def iter_summary(desc: dict[str, Any], output: str) -> Iterator[str]:
    s = desc["sample"]
    t = desc.get("_timing", {})
    yield f"vocabulary written to {output}"
    yield (
        f"  pieces {desc['num_pieces']:,} + extra ids {desc['extra_ids']} = V {desc['vocab_size']:,}"
        f" (embedding rows E {desc['embedding_size']:,}); <extra_id_0> = {desc['vocab_size'] - 1}"
    )
    yield (
        f"  sample: {s['lines']:,} lines, {s['characters']:,} chars from {s['documents']:,} documents "
        f"in {s['files']} file(s); {s['lines_too_long']:,} lines over {MAX_SENTENCE_BYTES} bytes skipped, "
        f"{s['documents_empty']:,} empty documents"
    )
    yield f"  sha256 {desc['sha256']}"
    if t:
        yield f"  time: sampling {t['sample_s']:.1f} s, training {t['train_s']:.1f} s"
