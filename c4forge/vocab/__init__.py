"""SentencePiece vocabularies with T5's conventions (`c4forge vocab`, objectives.md §1).

Not named `tokenizers` at top level on purpose: it lives inside c4forge so it never shadows
HF's `tokenizers` package.
"""

from c4forge.vocab.vocab import Vocabulary

__all__ = ["Vocabulary"]
