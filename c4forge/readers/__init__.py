"""Readers: crawl files → pages, counting every record they skip (c4_rules.md §3).

``wet`` (Common Crawl WET), ``warc_html`` (WARC responses, HTML → text) and ``gzip_stream`` (the
multi-member gzip decoder both use). ``read_input`` is the clean plan's read step: one input
path → its pages, counted under stage ``wet`` (``warc_html.READ_FLOW``)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any


def read_input(
    path: str, count: Any, *, max_record_bytes: int, input_format: str
) -> Iterator[Any]:
    """One input path → its pages (c4_rules.md §3). The reader counts every ``wet.*`` reason."""
    if input_format == "c4":
        from c4forge.readers.c4_docs import read_documents

        yield from read_documents(path, count)
    elif input_format == "wet":
        from c4forge.readers.wet import open_binary, read_wet

        with open_binary(path) as stream:
            yield from read_wet(
                stream, path.rsplit("/", 1)[-1], count, max_record_bytes=max_record_bytes
            )
    else:  # "warc" or "auto" (decided per file by sniffing its first records)
        from c4forge.readers.warc_html import read_path

        yield from read_path(
            path, count, input_format=input_format, max_record_bytes=max_record_bytes
        )


def stage(job: Any) -> Any:
    """The read step of ``job``'s plan: ``(path, count) -> pages``."""
    return functools.partial(
        read_input, max_record_bytes=job.max_record_bytes, input_format=job.input_format
    )
