"""`c4forge experiment`: one TOML file from corpus to a GLUE table.

``schema`` reads and checks the file, ``stages`` turns it into a graph of content-keyed stages,
``execute`` runs one stage through its own entry point, ``runner`` runs the graph (resuming,
skipping what is done, spreading arms over GPUs), ``results`` / ``stats`` / ``plots`` make the
table from the run folders' files. Shipped configs: ``c4forge/experiments/configs/``.
"""
