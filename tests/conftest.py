"""Shared fixtures: where the real test data lives (see tests/data/SOURCES.md)."""

from __future__ import annotations

import os

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(TESTS, "data")
REPO = os.path.dirname(TESTS)
SAMPLE = os.path.join(REPO, "c4forge", "data", "sample")

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tests run two per core under pytest-xdist: one intra-op thread each avoids oversubscription.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def data_dir() -> str:
    return DATA


@pytest.fixture(scope="session")
def genuine_wet_files() -> list[str]:
    """Genuine Common Crawl WET excerpts (gzip per record, and uncompressed)."""
    wet = os.path.join(DATA, "wet")
    return sorted(os.path.join(wet, f) for f in os.listdir(wet) if ".wet" in f)


@pytest.fixture(scope="session")
def derived_wet() -> str:
    """191 conversion records made from real WARC HTML (the largest real WET here)."""
    return os.path.join(SAMPLE, "real-warc-html-to-wet.resiliparse.warc.wet.gz")


@pytest.fixture(scope="session")
def c4_sample() -> str:
    """1,000 real C4 documents (json.gz, fields text/url/date)."""
    return os.path.join(SAMPLE, "c4-sample.00000-of-00001.json.gz")
