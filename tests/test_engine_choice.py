"""``--engine auto``: one policy for `clean` and `shards` (``engines.choose``)."""

from __future__ import annotations

from c4forge.engines.choose import choose


def test_auto_is_local_on_this_machine_and_beam_for_a_runner() -> None:
    assert choose("spark", None, (), 0) == ("spark", "")  # asked for: kept, no reason shown
    engine, why = choose("auto", "DataflowRunner", (), 10 << 30)
    assert engine == "beam" and "Beam runner" in why
    assert choose("auto", None, ("--project=p",), 10 << 30)[0] == "beam"
    engine, why = choose("auto", None, (), 52_000_000)
    assert engine == "local" and why == "auto: 52.0 MB of input on this machine"
    assert choose("auto", None, (), 1)[0] == "local"  # small inputs too
    assert choose("auto", "DirectRunner", (), 1)[0] == "beam"  # Beam named: Beam
