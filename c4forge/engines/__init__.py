"""Engines that run a clean plan (``c4forge.clean.plan``): Beam, native Spark, in-process local.

``base.Engine`` is the seam: a few primitives (map with counters, group / combine / co-group by
key, distinct, a bounded loop, write the output groups, read the counters). Stages are written
once against it; an engine only implements the primitives and its resumable front.
"""
