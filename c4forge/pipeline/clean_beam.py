"""Compatibility alias (issue 12): the clean job is ``c4forge.clean`` run by
``c4forge.engines``; only ``user_error_from`` (``c4forge.engines.errors``) is kept here for code
written against the old module."""

from c4forge.engines.errors import user_error_from  # noqa: F401
