"""`c4forge shards`: clean documents → tokenized, corrupted, packed Arrow shards (formats.md §3).

An engine-free core and a thin Beam module:

- ``job``: the typed, frozen ``ShardsJob`` (built and validated once, from the CLI) and the
  ``ShardsBuild`` it resolves to (vocabulary, input files, schema, manifest);
- ``rows``: the rows of one clean shard, split by output shard, sorted and written;
- ``output``: the output folder's state machine (fresh / resume / done), the finishing pass
  (empty shards, stats, vocabulary copy, index.json last);
- the shard set's own copy of its vocabulary (``SHARDS/vocab/``) is ``c4forge.vocab.vocab_files``'s;
- ``report``: the summary and the progress bar; ``verify``: ``c4forge shards verify``;
- ``driver``: one build start to end (resolve, output state, engine, finish, summary);
- ``beam``: the Beam pipeline (the only module here that imports Beam); ``cli``: argparse.
"""
