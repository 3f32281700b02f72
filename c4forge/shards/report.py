"""What a person sees of a shard build: the summary lines and the progress bars."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from c4forge.formats import shards as fmt
from c4forge.io import storage
from c4forge.shards.build import ShardsBuild
from c4forge.shards.rows import CLEAN_STATS_DIR

# Objectives no longer registered (an old index.json) are summarised like the T5 family.
_DEFAULT_COUNTS = (
    ("trimmed targets", "targets_truncated"),
    ("dropped >sentinels", "too_many_spans"),
)


# `shards task` sets (text-to-text rows): examples, not documents; nothing is corrupted.
_TASK_OBJECTIVE = "text_to_text"
_TASK_COUNTS = (("inputs cut", "inputs_truncated"), ("targets cut", "targets_truncated"))


def _summary_fields(name: str) -> tuple[tuple[tuple[str, str], ...], str]:
    from c4forge.objectives.registry import OBJECTIVES

    if name == _TASK_OBJECTIVE:
        return _TASK_COUNTS, "input / target tokens"
    spec = OBJECTIVES.get(name)
    if spec is None:
        return _DEFAULT_COUNTS, "input / target tokens"
    return spec.summary_counts, spec.summary_sides


def summary_lines(
    index: dict[str, Any], output: str, seconds: float | None, runner: str
) -> list[str]:
    obj = index["objective"]
    task = obj.get("task") if obj["name"] == _TASK_OBJECTIVE else None
    head = (
        f"c4forge shards task: {task} ({obj['name']})" if task else f"c4forge shards: {obj['name']}"
    )
    lines = [
        f"{head} {obj['inputs_length']}/{obj['targets_length']} "
        f"packing={obj['packing']} seed={index['seed']} dtype={index['token_dtype']}",
    ]
    counted, sides = _summary_fields(obj["name"])
    for split, block in index["splits"].items():
        pad_in = fmt.padding_fraction(block, obj["inputs_length"], "input_tokens")
        pad_tg = fmt.padding_fraction(block, obj["targets_length"], "target_tokens")
        st = index.get("stats", {}).get(split, {})
        counts = ", ".join(f"{label} {st.get(key, 0):,}" for label, key in counted)
        if task:
            n = st.get("examples", 0)
            made = f"examples {n:,}, {n / max(1, block['rows']):.1f} per row"
        else:
            made = f"docs {st.get('documents', 0):,}, empty {st.get('documents_empty', 0):,}"
        lines.append(
            f"  {split:<10} {block['num_shards']:>4} shards {block['rows']:>10,} rows  "
            f"{block['input_tokens']:>12,} / {block['target_tokens']:,} {sides}  "
            f"padding {pad_in:.2%} / {pad_tg:.2%}  "
            f"({made}, {counts})"
        )
    size = sum(r["bytes"] for b in index["splits"].values() for r in b["shards"])
    lines.append(f"  files      {output}/ ({size / 1e6:,.1f} MB), manifest {output}/index.json")
    lines.append(
        f"  fingerprint {index['dataset_fingerprint']}  vocabulary {index['vocabulary']['sha256']}"
    )
    copy = index.get("vocab_files")
    if copy:
        names = ", ".join(r["file"] for r in copy["files"])
        lines.append(f"  vocabulary {storage.join(output, copy['directory'])}/ ({names})")
    if seconds is not None:
        lines.append(f"  time       {seconds:,.1f} s on {runner}")
    return lines


class ProgressWatcher:
    """A progress display (``c4forge.progress``) fed by the files the workers write (clean shards read, shards written)."""

    def __init__(self, build: ShardsBuild, quiet: bool, units: int | None = None) -> None:
        self.build = build
        self.units = units or sum(len(f) for f in build.clean_files.values())
        self.stop = threading.Event()
        self.thread = None if quiet else threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from c4forge.progress import progress

        clean_total = self.units
        files = sum(len(f) for f in self.build.clean_files.values())
        unit = "file" if clean_total == files else "part"
        shards_total = sum((self.build.num_shards or {}).values()) or None
        pdir = storage.join(self.build.job.output, fmt.PROGRESS_DIR)
        # A bucket listing costs a request: poll it every 10 s, a local folder every 0.5 s.
        every = 10.0 if storage.is_remote(pdir) else 0.5
        with (
            progress(total=clean_total, desc="clean shards read", unit=unit) as a,
            progress(total=shards_total, desc="shards written", unit="shard") as b,
        ):

            def poll() -> None:
                with contextlib.suppress(OSError):
                    done = len(storage.listdir(storage.join(pdir, CLEAN_STATS_DIR)))
                    a.update(min(done, clean_total) - a.n)
                    b.update(sum(n.endswith(".arrow.json") for n in storage.listdir(pdir)) - b.n)

            while not self.stop.wait(every):
                poll()
            # once more after the build: a job shorter than one period (the local engine on a
            # small corpus) would otherwise close its bars at 0 %
            poll()

    def __enter__(self) -> ProgressWatcher:
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
