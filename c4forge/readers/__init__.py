"""Readers: crawl files → pages, counting every record they skip (c4_rules.md §3).

``wet`` (Common Crawl WET), ``warc_html`` (WARC responses, HTML → text) and ``gzip_stream`` (the
multi-member gzip decoder both use). ``read_input`` is the clean plan's read step: one input
path → its pages, counted under stage ``wet`` (``warc_html.READ_FLOW``)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from c4forge.corpus.stages import StageJob


def read_input(path: str, count: Any, *, max_record_bytes: int, input_format: str) -> Iterator[Any]:
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


RESILIPARSE_MISSING = (
    "crawl WARC input needs resiliparse (HTML → text), which is not installed or does not "
    "load: pip install 'c4forge[warc]'"
)


def require_resiliparse() -> None:
    """Raise a ``ConfigError`` saying how to get resiliparse when it does not import."""
    from c4forge.optional import require

    require(("resiliparse.extract.html2text", "resiliparse.parse.encoding"), RESILIPARSE_MISSING)


def check_inputs(paths: list[str], input_format: str) -> None:
    """Before any work: the optional package that reading ``paths`` needs is there. Crawl WARC
    input needs resiliparse; with ``auto`` the files are sniffed (their first records) only
    when it is missing, so a run on WET files never needs it."""
    from c4forge.errors import ConfigError

    if input_format == "wet":
        return
    try:
        require_resiliparse()
    except ConfigError as err:
        if input_format == "warc":
            raise
        from c4forge.readers.warc_html import detect_input_format

        for path in paths:
            if detect_input_format(path) == "warc":
                raise ConfigError(f"{path} is a crawl WARC: {err}") from None


def stage(job: StageJob) -> Any:
    """The read step of ``job``'s plan: ``(path, count) -> pages``."""
    return functools.partial(
        read_input, max_record_bytes=job.max_record_bytes, input_format=job.input_format
    )
