"""Old import paths kept for one release: each warns once (DeprecationWarning) and gives the object under its new name."""
from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

_warned: set[str] = set()


def warn_once(old: str, new: str) -> None:
    """Warn, the first time only, that ``old`` is now ``new`` and that the old name goes in the next release."""
    if old in _warned:
        return
    _warned.add(old)
    warnings.warn(f"{old} is now {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3)


def moved(module: str, names: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` that resolves each old name in ``names`` (old name to the new
    ``"package.module.Name"``) with a warning, so imports and configs written before a move keep working."""

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where, _, attr = target.rpartition(".")
        warn_once(f"{module}.{name}", target)
        return getattr(importlib.import_module(where), attr)

    return __getattr__
