"""RealNews domain filter (``--variant realnewslike``), as TFDS ``c4_utils.is_realnews_domain``.

The reference splits the page's *normalized* URL with ``tldextract`` into subdomain, domain
and suffix, and keeps the page iff ``domain + "." + suffix`` is a key of RealNews'
``domain_to_allowed_subdomains.json`` and, where the key maps to a list (not ``true``), the
subdomain is one of the entries. It runs right after the page-length filter, before URL dedup.

Two things the reference leaves to its environment are pinned here:

* the domain list ships as package data (``c4forge/data/realnews/``, grover @ 38f7184b, the
  commit TFDS pins) and is checked against its sha256, so a damaged copy is an error, not a
  silently smaller corpus; ``--domain-list FILE`` may name another list of the same shape;
* ``tldextract`` never touches the network: the extractor is built with no suffix-list URLs
  and no cache directory, so it always uses the public-suffix snapshot bundled in the wheel
  (the reference's default extractor would try to download the current list). Its version and
  the snapshot's sha256 are recorded, because a newer snapshot can move a page's suffix.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.resources
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.stages import StageJob
from c4forge.errors import ConfigError, InputError

STAGE = "realnews"
REASONS: tuple[str, ...] = ("bad_domain", "bad_subdomain", "passed")
FLOW = Flow(REASONS[:2], REASONS[2:], title="RealNews domains")
BUNDLED_NAME = "domain_to_allowed_subdomains.json"
BUNDLED_SHA256 = "75681899371acbf57b502ca8be48b3ca2d3339a276c396f3001b6a14da691ff3"
BUNDLED_SOURCE = (
    "github.com/rowanz/grover realnews/domain_to_allowed_subdomains.json "
    "@ 38f7184bd87237ae2d3bc330b99f1e2e246f6d51 (Apache-2.0)"
)


@dataclass(frozen=True)
class DomainList:
    """Registered domain → ``None`` (every subdomain allowed) or the allowed subdomains."""

    allowed: Mapping[str, frozenset[str] | None] = field(repr=False)
    sha256: str
    source: str  # "bundled" or the path the user gave

    def fingerprint(self) -> dict:
        restricted = sum(1 for v in self.allowed.values() if v is not None)
        return {
            "source": BUNDLED_SOURCE if self.source == "bundled" else self.source,
            "sha256": self.sha256,
            "domains": len(self.allowed),
            "domains_with_subdomain_list": restricted,
        }


def _parse(raw: bytes, where: str) -> dict[str, frozenset[str] | None]:
    """Validate the file's shape: a JSON object of ``"domain.suffix": true | [subdomain, …]``."""
    try:
        obj: Any = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(
            f"RealNews domain list {where} is damaged: not UTF-8 JSON ({err})"
        ) from None
    if not isinstance(obj, dict) or not obj:
        raise InputError(
            f"RealNews domain list {where} is damaged: expected a non-empty JSON object "
            '{"domain.suffix": true | ["subdomain", …]}'
        )
    out: dict[str, frozenset[str] | None] = {}
    for domain, value in obj.items():
        if value is True:
            out[domain] = None
        elif isinstance(value, list) and all(isinstance(s, str) for s in value):
            out[domain] = frozenset(value)
        else:
            raise InputError(
                f"RealNews domain list {where} is damaged: {domain!r} maps to {value!r} "
                "(expected true or a list of subdomains)"
            )
    return out


def load_domain_list(path: str | None = None) -> DomainList:
    """The bundled list (``path`` None), verified against its pinned sha256, or a user's file."""
    if path is None:
        root = importlib.resources.files("c4forge") / "data" / "realnews"
        raw = root.joinpath(BUNDLED_NAME).read_bytes()
        digest = hashlib.sha256(raw).hexdigest()
        if digest != BUNDLED_SHA256:
            raise InputError(
                f"the bundled RealNews domain list c4forge/data/realnews/{BUNDLED_NAME} is "
                f"damaged: sha256 {digest}, expected {BUNDLED_SHA256}; reinstall c4forge"
            )
        return DomainList(_parse(raw, "(bundled)"), digest, "bundled")
    from c4forge.io import storage

    if not storage.exists(path):
        raise InputError(f"RealNews domain list {path} does not exist")
    raw = storage.read_bytes(path)
    return DomainList(_parse(raw, path), hashlib.sha256(raw).hexdigest(), path)


_LOCAL = threading.local()


def _extractor() -> Any:
    """One offline ``TLDExtract`` per thread: bundled snapshot only, no URLs, no disk cache."""
    ex = getattr(_LOCAL, "extractor", None)
    if ex is None:
        import tldextract

        ex = tldextract.TLDExtract(
            cache_dir=None,  # nothing read from or written to ~/.cache
            suffix_list_urls=(),  # nothing fetched, ever
            fallback_to_snapshot=True,  # the public-suffix list bundled in the wheel
            include_psl_private_domains=False,  # as tldextract.extract, the reference's call
        )
        _LOCAL.extractor = ex
    return ex


def split_host(normalized_url: str) -> tuple[str, str]:
    """``(domain.suffix, subdomain)`` exactly as the reference forms them (an empty suffix
    gives ``"domain."``, which is never a key)."""
    ext = _extractor()(normalized_url)
    return f"{ext.domain}.{ext.suffix}", ext.subdomain


def realnews_filter(normalized_url: str, domains: DomainList, count: Count) -> bool:
    """Keep the page? ``bad_domain`` / ``bad_subdomain`` / ``passed`` (TFDS counter names
    ``filtered:bad_domain``, ``filtered:bad_subdomain``, ``passed``)."""
    main, subdomain = split_host(normalized_url)
    if main not in domains.allowed:
        count(STAGE, "bad_domain")
        return False
    allowed = domains.allowed[main]
    if allowed is not None and subdomain not in allowed:
        count(STAGE, "bad_subdomain")
        return False
    count(STAGE, "passed")
    return True


def tldextract_fingerprint() -> dict:
    """tldextract's version and the sha256 of the public-suffix snapshot it ships."""
    import tldextract

    snapshot = os.path.join(os.path.dirname(tldextract.__file__), ".tld_set_snapshot")
    try:
        with open(snapshot, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError as err:
        raise ConfigError(
            f"tldextract {importlib.metadata.version('tldextract')} has no bundled public-suffix "
            f"snapshot ({err}); c4forge never downloads the list"
        ) from None
    return {
        "package": "tldextract",
        "version": importlib.metadata.version("tldextract"),
        "suffix_snapshot_sha256": digest,
        "private_domains": False,
        "network": False,
    }


# --- the plan's stage ----------------------------------------------------------------------


def realnews(page: Any, count: Count, *, domains: DomainList) -> Iterator[Any]:
    """RealNews domain filter on the normalized URL (after length, before URL dedup)."""
    if realnews_filter(page.normalized_url, domains, count):
        yield page


def stage(job: StageJob) -> Any:
    """``--variant realnewslike`` only: a page stage after ``length``."""
    import functools

    from c4forge.corpus.stages import MapStage

    if not job.spec.realnews:
        return None
    return MapStage(STAGE, functools.partial(realnews, domains=job.domains), flow=FLOW)
