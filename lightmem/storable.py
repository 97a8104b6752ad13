"""Text every store and every answer can hold: the one check of each string a caller passes, shared by every
module that takes input (``lightmem.validation``, ``lightmem.metadata_filter``, ``lightmem.timeutil``, the
filters in ``lightmem.types``), which sit below ``validation`` and so cannot import it."""
from __future__ import annotations

from lightmem.errors import InvalidInputError


def check_unicode(text: str, what: str) -> str:
    """Return ``text`` when every store can keep it: UTF-8 text without NUL.

    JSON's ``"\\ud800"`` decodes to a lone surrogate, which Python keeps in a ``str`` but no store
    (SQLite, PostgreSQL) nor HTTP answer can encode. PostgreSQL's text and jsonb cannot hold the
    NUL character (``"\\u0000"``); it is refused on every backend so that both take the same input.
    The message names the character's position, never the text.

    Raises:
        InvalidInputError: ``text`` holds a lone surrogate or a NUL character.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{what} is not valid Unicode text: character {exc.start + 1} is a lone surrogate "
                                f"({text[exc.start]!r}), half of a pair; send the whole character") from exc
    nul = text.find("\x00")
    if nul >= 0:
        raise InvalidInputError(f"{what} holds a NUL character (\\u0000) at character {nul + 1}, which a database "
                                "cannot store as text; remove it")
    return text
