"""`python -m c4forge …` (also what torchrun launches)."""

import sys

from c4forge.cli import main

if __name__ == "__main__":
    sys.exit(main())
