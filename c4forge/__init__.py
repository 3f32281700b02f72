"""c4forge: Common Crawl WET files to a trained GLU-Transformer.

Subpackages: ``filters`` (the C4 rules, plain functions), ``pipeline`` (Beam and Spark jobs),
``tokenizers`` (SentencePiece vocabulary), ``objectives`` (T5/BERT objectives, packing),
``formats`` (on-disk artefacts), ``trainers`` (model, optimisers, training loop, export).
"""

__version__ = "0.1.0"
