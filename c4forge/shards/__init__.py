"""`c4forge shards`: clean documents → tokenized, corrupted, packed Arrow shards (formats.md §3).

Engine-free: the stage is written once against the engine primitives (``c4forge.engines``),
so the local engine, Spark and Beam run the same build:

- ``job``: the typed, frozen request ``ShardsJob`` (its flags; built and validated once, by the
  CLI or a program);
- ``build``: the ``ShardsBuild`` a job resolves to (vocabulary, objective, input files, schema,
  manifest);
- ``rows``: the rows of one clean shard, split by output shard; a shard written from them;
- ``runs``: sorted runs of rows on storage and their merge (a worker never holds a shard);
- ``stage``: the build on the engine primitives (rows → runs → merge per output shard);
- ``output``: the output folder's state machine (fresh / resume / done), the finishing pass
  (empty shards, stats, vocabulary copy, index.json last);
- the shard set's own copy of its vocabulary (``SHARDS/vocab/``) is ``c4forge.vocab.vocab_files``'s;
- ``report``: the summary and the progress bar; ``verify``: ``c4forge shards verify``;
- ``driver``: one build start to end (resolve, output state, engine, finish, summary);
- ``command``: ``run(request) -> result`` for a build or a task's set (``c4forge.commands``);
- ``cli``: argparse.
"""
