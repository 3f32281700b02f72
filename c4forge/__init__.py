"""c4forge: Common Crawl WET files to a trained GLU-Transformer.

One subpackage per command (``clean``, ``vocab``, ``shards``, ``trainers``, ``finetune``,
``report``, ``contamination``, ``experiments``) and the rooms of the clean stages (``readers``,
``rules``, ``dedup``, ``langid``) and of what they share (``engines``, ``objectives``,
``formats``, ``io``). docs/ARCHITECTURE.md is the map.
"""

__version__ = "0.1.0"
