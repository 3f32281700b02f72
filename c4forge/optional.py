"""Optional packages a command needs, checked before it starts any work.

Several packages are extras (pyproject's ``[project.optional-dependencies]``) imported only
where they are used: ``safetensors`` when the first checkpoint is saved, scikit-learn and SciPy
when fine-tuning first evaluates, datasketch when near-dedup runs. Missing, each would stop a
run after its work was done, with a traceback. ``check`` turns that into one line, before any
work, naming the extra that installs it. (resiliparse depends on the inputs' format and is
checked by ``c4forge.readers.check_inputs``; gcld3 and pyspark by their own options.)
"""

from __future__ import annotations

import argparse
import importlib

from c4forge.errors import ConfigError

_TRAIN = (("torch", "train"), ("safetensors", "train"))
_FINETUNE = (*_TRAIN, ("sklearn", "finetune"), ("scipy", "finetune"))
# command → (module, extra) pairs it always needs.
NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "train": _TRAIN,
    "export": _TRAIN,
    "finetune": _FINETUNE,
    "evaluate": _FINETUNE,
    "glue": _FINETUNE,
}


def require(modules: tuple[str, ...], missing: str) -> None:
    """Import ``modules`` (a broken install fails here too, not only an absent one), else a
    ``ConfigError`` of ``missing`` (what needs them, how to install them) and the import error."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(f"{missing}; import error: {err}") from None


def needed(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The (module, extra) pairs the parsed command line ``args`` needs."""
    out = list(NEEDS.get(args.command, ()))
    if args.command == "clean" and getattr(args, "near_dedup", "none") == "minhash":
        out.append(("datasketch", "near-dedup"))
    return out


def check(args: argparse.Namespace) -> None:
    """Raise a ``ConfigError`` naming the first missing package and its extra."""
    for module, extra in needed(args):
        try:  # imported, not only found: a broken install fails here too (the run imports it)
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(
                f"{args.command} needs the Python package {module!r}, which is not installed or "
                f"does not load ({err}): pip install 'c4forge[{extra}]'"
            ) from None
