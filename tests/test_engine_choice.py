"""``--engine auto``: one policy for `clean` and `shards` (``engines.choose``)."""

from __future__ import annotations

from c4forge.engines.choose import AUTO_LOCAL_BYTES, choose


def test_auto_follows_the_runner_and_the_input_size() -> None:
    assert choose("spark", None, (), 0) == ("spark", "")  # asked for: kept, no reason shown
    engine, why = choose("auto", "DataflowRunner", (), 10 << 30)
    assert engine == "beam" and "Beam runner" in why
    assert choose("auto", None, ("--project=p",), 10 << 30)[0] == "beam"
    engine, why = choose("auto", None, (), AUTO_LOCAL_BYTES)
    assert engine == "local" and "≥ 64 MiB" in why
    engine, why = choose("auto", "DirectRunner", (), AUTO_LOCAL_BYTES - 1)
    assert engine == "beam" and "< 64 MiB" in why
