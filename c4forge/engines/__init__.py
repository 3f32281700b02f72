"""Engines that run a stage's steps: Beam, native Spark, in-process local.

``base.Engine`` is the seam: a few primitives (a source, map with counters, group / combine /
co-group by key, distinct, broadcast, a bounded loop, drain, collect, read the counters). The
clean plan (``c4forge.clean.passes``) and the shard build (``c4forge.shards.stage``) are written
once against them; an engine implements the primitives only and imports no stage room (its
counters and dropped-item samples are the base room's: ``c4forge.corpus.counting``,
``c4forge.corpus.drop_samples``; ``tests/test_rooms.py`` keeps it so).
"""
