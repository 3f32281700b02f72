"""The resource fingerprints of a clean job, per corpus variant (stats.json ``config.resources``).

Everything that decides which pages survive is recorded, so two outputs with equal configs
were built with the same rules and the same resources: the ``en`` job's fingerprints
(bad-words file, Punkt, langdetect, library versions) exactly as before issue 10, plus, per
variant, the RealNews domain list and the tldextract snapshot, the URL list's sha256 and URL
count, the CLD3 package's name and version and every per-language bad-words file.
"""

from __future__ import annotations

from typing import Any


def job_resources(job: Any) -> dict[str, Any]:
    from c4forge.clean.stats import resource_fingerprints

    v = job.spec
    out = resource_fingerprints(job.language)
    if v.badwords_fraction == 0.0:
        del out["badwords"]  # no bad-words stage
    elif v.multilingual:
        out["badwords"] = multilingual_badwords()
    if v.multilingual:
        from c4forge.langid.cld3_filter import cld3_fingerprint

        del out["langdetect"]
        out["cld3"] = cld3_fingerprint()
    if v.realnews:
        from c4forge.rules.realnews import tldextract_fingerprint

        out["realnews_domains"] = job.domains.fingerprint()
        out["tldextract"] = tldextract_fingerprint()
    if v.webtext:
        out["url_list"] = job.url_list_info.fingerprint()
    return out


def multilingual_badwords() -> dict[str, Any]:
    """Every LDNOOBW list mC4 uses (``en`` from the C4 pin), by language code."""
    from c4forge.rules.badwords import badwords_fingerprint, list_languages

    return {lang: badwords_fingerprint(lang) for lang in list_languages()}
