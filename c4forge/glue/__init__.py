"""The GLUE task data definitions (``tasks``: the tasks, their files and labels; ``formats``:
T5's text-to-text form of an example), below every room that reads evaluation sets:
``contamination`` (n-grams), ``shards`` (``shards task``) and ``finetune``."""
