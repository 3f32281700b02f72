"""Compatibility alias: the file layer is ``c4forge.io.storage`` (issue 12). Kept only so code
written against the old name keeps importing; new code imports ``c4forge.io.storage``."""

from c4forge.io.storage import *  # noqa: F403
