"""Who is using the console: a signed sign-in cookie, or an ``Authorization: Bearer`` key; and CSRF tokens.

A person signs in once per browser session with an API key. The cookie holds no key: it holds the key's label
(its position in the keys file), a random session id and an expiry, signed with ``KeyRing.secret`` (every worker
derives the same secret; a change to the keys file invalidates the cookies signed before). Each
mutating form carries a token derived from the session id, so another site cannot post a form as the
signed-in person (the cookie is ``SameSite=Strict`` too). A request carrying a key as a bearer header (a
script, an outside check) is signed in for that request alone and needs no token: browsers never add
that header on their own.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from lightmem.server.auth import KeyRing, Principal

COOKIE = "lightmem_console"
SESSION_SECONDS = 12 * 3600  # a cookie copied out of a browser stops working after this, even if never signed out
PATH = "/ui"


@dataclass(frozen=True)
class Visitor:
    """A signed-in caller of a console page.

    Attributes:
        principal: The key's principal (``auth.Principal``): the users it may act for.
        csrf: The token mutating forms must carry; empty for a bearer request, which needs none.
        by_cookie: True when signed in by the cookie (forms are then checked for ``csrf``).
    """

    principal: Principal
    csrf: str
    by_cookie: bool

    @property
    def is_admin(self) -> bool:
        return self.principal.users is None

    def visible_users(self, memory: Any) -> list[str]:
        """The users this visitor's pages list: every user of the store for an admin key, else the key's own."""
        return memory.users() if self.is_admin else sorted(self.principal.users or ())


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(keys: KeyRing, purpose: bytes, payload: bytes) -> bytes:
    return hmac.new(keys.secret(), purpose + b"\x00" + payload, hashlib.sha256).digest()


def csrf_token(keys: KeyRing, sid: str) -> str:
    return _b64(_mac(keys, b"csrf", sid.encode("ascii")))


def sign_in(response: Response, request: Request, keys: KeyRing, principal: Principal) -> None:
    """Set the session cookie of ``principal`` on ``response`` (a browser-session cookie: no Max-Age)."""
    payload = json.dumps({"sid": secrets.token_urlsafe(16), "label": principal.label,
                          "exp": int(time.time()) + SESSION_SECONDS}, separators=(",", ":")).encode()
    value = f"{_b64(payload)}.{_b64(_mac(keys, b'session', payload))}"
    response.set_cookie(COOKIE, value, path=PATH, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")


def sign_out(response: Response) -> None:
    response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict")


def from_cookie(request: Request, keys: KeyRing) -> Visitor | None:
    """The visitor of a valid, unexpired, correctly signed cookie; None otherwise."""
    raw = request.cookies.get(COOKIE, "")
    body, _, mac = raw.partition(".")
    try:
        payload, given = _unb64(body), _unb64(mac)
    except (ValueError, TypeError):
        return None
    if not hmac.compare_digest(given, _mac(keys, b"session", payload)):
        return None
    data = json.loads(payload)
    principal = keys.principal(data["label"])
    if data["exp"] < time.time() or principal is None:
        return None
    return Visitor(principal, csrf_token(keys, data["sid"]), by_cookie=True)


def visitor(request: Request, keys: KeyRing) -> Visitor | None:
    """The caller: a bearer key when the request carries one (a wrong key is no visitor, whatever the cookie
    says), else the sign-in cookie."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if header:
        found = keys.identify(key.strip()) if scheme.lower() == "bearer" and key.strip() else None
        return None if found is None else Visitor(found, "", by_cookie=False)
    return from_cookie(request, keys)


def same_origin(request: Request) -> bool:
    """False when the browser says the request comes from another site (``Origin`` or ``Sec-Fetch-Site``)."""
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
        return False
    return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")


def form_allowed(request: Request, who: Visitor, token: str | None) -> bool:
    """Whether a mutating form may act: a bearer request always; a cookie's only from the console's own
    origin with the session's token."""
    if not who.by_cookie:
        return True
    return same_origin(request) and token is not None and hmac.compare_digest(token.encode(), who.csrf.encode())
