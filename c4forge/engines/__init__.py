"""Engines that run a clean plan (``c4forge.clean.plan``): Beam, native Spark, in-process local.

``base.Engine`` is the seam: a few primitives (map with counters, group / combine / co-group by
key, distinct, a bounded loop, write the output groups, read the counters). The plan is run
keys-only once against them (``c4forge.clean.passes``); an engine implements the primitives
only.
"""
