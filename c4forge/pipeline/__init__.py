"""Old import paths: the engines own their launch code now (``c4forge.engines``).

``c4forge.pipeline.beam_options``, ``.beam_worker``, ``.spark_launch`` and ``.cli_common``
still import, as the modules they became, for programs written against them.
"""

from __future__ import annotations

import importlib
import sys

_MOVED = {
    "beam_options": "c4forge.engines.beam_options",
    "beam_worker": "c4forge.engines.beam_worker",
    "spark_launch": "c4forge.engines.spark_launch",
    "cli_common": "c4forge.engines.options",
}

for _old, _new in _MOVED.items():
    sys.modules[f"{__name__}.{_old}"] = importlib.import_module(_new)
