"""API keys: which users each key may act for, checked in constant time."""
from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lightmem.errors import LightMemError

ADMIN = "*"
MIN_KEY_LENGTH = 16
_KEY_HINT = "make one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"


class KeyFileError(LightMemError):
    """A keys file is missing, not JSON, holds a key no client could send, or maps a key to
    something other than a list of user ids."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: a label safe to log (never the key) and the users it covers.

    Attributes:
        label: ``key #N``, the key's position in the keys file.
        users: The user ids this key may act for; ``None`` for an admin key (``"*"``).
    """

    label: str
    users: frozenset[str] | None

    def may_act_for(self, user_id: str) -> bool:
        return self.users is None or user_id in self.users


class KeyRing:
    """The API keys a server accepts.

    Keys are kept as SHA-256 digests and a presented key is compared with every one of them by
    ``hmac.compare_digest``, so neither the time a lookup takes nor its length depends on which
    key, or how much of one, matched.

    Args:
        keys: API key -> the user ids it may act for; ``"*"`` (alone or in the list) makes it an admin key.

    Raises:
        KeyFileError: a key shorter than 16 characters or with a character an ``Authorization: Bearer``
            header cannot carry (see ``check_key``), or a value that is not a list of user ids.
    """

    def __init__(self, keys: Mapping[str, Sequence[str] | str]) -> None:
        self._entries: list[tuple[bytes, Principal]] = []
        for n, (key, users) in enumerate(keys.items(), 1):
            check_key(key, n)
            if isinstance(users, str):
                users = [users]
            if not isinstance(users, Sequence) or not users or not all(isinstance(u, str) and u.strip() for u in users):
                raise KeyFileError(f'key #{n} must map to a non-empty list of user ids (or ["*"] for an admin key)')
            principal = Principal(f"key #{n}", None if ADMIN in users else frozenset(users))
            self._entries.append((_digest(key), principal))
        if not self._entries:
            raise KeyFileError(f"no API keys given: the server would refuse every request; {_KEY_HINT}")

    @classmethod
    def load(cls, path: str | Path) -> "KeyRing":
        """Read a JSON object ``{"<key>": ["alice", "bob"], "<admin key>": ["*"]}``."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise KeyFileError(f"no keys file at {path}: write a JSON object mapping each API key to its user ids") from exc
        except json.JSONDecodeError as exc:
            raise KeyFileError(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        if not isinstance(data, dict):
            raise KeyFileError(f'{path} must hold a JSON object: {{"<key>": ["alice"], "<admin key>": ["*"]}}')
        return cls(data)

    def secret(self) -> bytes:
        """A secret every worker of a server derives alike from its keys: the console signs its sign-in
        cookies with it, so a change to the keys file ends the sessions signed before."""
        return hashlib.sha256(b"lightmem-console\x00" + b"".join(d for d, _ in self._entries)).digest()

    def principal(self, label: str) -> Principal | None:
        """The principal whose label is ``label`` (``key #N``), or None when the keys file has no such key."""
        return next((p for _, p in self._entries if p.label == label), None)

    def identify(self, key: str) -> Principal | None:
        """The principal of ``key``, or None when no key matches. Looks at every key, whatever matches."""
        presented = _digest(key)
        found = None
        for digest, principal in self._entries:
            if hmac.compare_digest(presented, digest):
                found = principal
        return found


def check_key(key: object, n: int) -> None:
    """Refuse a key that could never authenticate; the message names its position ``n``, never the key.

    A key travels as ``Authorization: Bearer <key>``: servers strip the spaces around a header
    value, HTTP clients send only ASCII (and the server would read other bytes as Latin-1, not
    UTF-8), and a bearer token (RFC 6750) has no spaces or control characters. So a key is 16 or
    more visible ASCII characters, ``!`` to ``~``; anything else would get 401 on every request.

    Raises:
        KeyFileError: ``key`` is not a string, is too short, or holds another character.
    """
    if not isinstance(key, str):
        raise KeyFileError(f"key #{n} is not a string: {_KEY_HINT}")
    if len(key) < MIN_KEY_LENGTH:
        raise KeyFileError(f"key #{n} is shorter than {MIN_KEY_LENGTH} characters: {_KEY_HINT}")
    bad = next(((i, c) for i, c in enumerate(key, 1) if not "!" <= c <= "~"), None)
    if bad is not None:
        i, c = bad
        if c.isspace() and (i == 1 or i == len(key)):
            why = "starts or ends with whitespace, which HTTP servers strip from the header"
        elif c.isspace():
            why = f"has whitespace (character {i}), which a bearer token cannot hold"
        elif not c.isascii():
            why = f"has a non-ASCII character (character {i}), which HTTP clients cannot send in a header"
        else:
            why = f"has a control character (character {i}), which an HTTP header cannot carry"
        raise KeyFileError(f"key #{n} {why}, so it could never authenticate: use only the visible ASCII "
                           f"characters ! to ~ (letters, digits, - _ . ~ + / =); {_KEY_HINT}")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()
