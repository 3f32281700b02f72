"""The plan's ``langid`` stage: langdetect for C4 (one language kept), CLD3 for mC4
(``--variant multilingual``: every page tagged with its language, the unwanted ones dropped).

The two detectors are this package's other modules; this one picks between them for a job
and adapts each to the plan's ``fn(doc, count)`` (after decontamination, before bad words)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from c4forge.corpus.counting import Count
from c4forge.corpus.documents import Doc
from c4forge.corpus.drop_samples import with_url
from c4forge.corpus.stages import StageJob
from c4forge.langid.langdetect_filter import STAGE


def langdetect(doc: Doc, count: Count, *, language: str) -> Iterator[Doc]:
    from c4forge.langid.langdetect_filter import langid_filter

    if langid_filter(doc.text, with_url(count, doc.url), language):
        yield doc


def cld3(doc: Doc, count: Count, *, languages: frozenset[str]) -> Iterator[Doc]:
    from c4forge.langid.cld3_filter import cld3_language

    lang = cld3_language(doc.text, with_url(count, doc.url), languages)
    if lang is not None:
        yield doc._replace(language=lang)


def stage(job: StageJob) -> Any:
    from c4forge.corpus.stages import MapStage

    if job.spec.multilingual:
        from c4forge.langid.cld3_filter import FLOW

        fn = functools.partial(cld3, languages=frozenset(job.languages))
        return MapStage(STAGE, fn, flow=FLOW)
    from c4forge.langid.langdetect_filter import FLOW

    return MapStage(STAGE, functools.partial(langdetect, language=job.language), flow=FLOW)
