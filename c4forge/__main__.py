"""`python -m c4forge …` (also what torchrun launches, and the script spark-submit runs)."""

import os
import sys

# Run as a script (`spark-submit …/c4forge/__main__.py`), Python puts this package's own folder
# first on sys.path, where its subpackages (`langid/`, `vocab/`, `report/` …) would shadow
# top-level packages of the same names (the `langid` library). c4forge itself is imported from
# the installed or shipped package.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

from c4forge.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
