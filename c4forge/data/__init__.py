"""The data files that ship with the package; the paths other rooms read them at."""

from __future__ import annotations

import os

# GLUE as bundled (byte-exact task files): the demo's fine-tuning, experiments' "bundled",
# `shards task`'s default folder and `--decontaminate glue`
BUNDLED_GLUE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "glue")
