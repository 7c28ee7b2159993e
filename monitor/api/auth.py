"""Bearer tokens with ``read`` and ``write`` scopes, checked before any route runs.

Tokens come from one setting, ``MONITOR_API_TOKENS="read:TOKEN_A,write:TOKEN_B"``; ``write`` implies
``read``. Only SHA-256 digests are kept in memory (a token may also be configured as its digest,
``read:sha256:<64 hex>``, so that the plain token never sits in the environment), and a presented
token is compared with every stored digest in constant time (:func:`hmac.compare_digest`).

The check is an ASGI middleware rather than a route dependency so that it runs before the request
body is read or parsed: an unauthenticated client gets 401 whatever it sends, and a route added
later cannot forget it. GET/HEAD/OPTIONS need ``read``; every other method needs ``write``.
A browser that logged in on ``/login`` is authenticated by its session cookie instead, on
GET/HEAD/OPTIONS only (:mod:`monitor.api.sessions`); a browser asking for a page without either
is sent to the login page.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING
from urllib.parse import quote

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from monitor.errors import MonitorError

if TYPE_CHECKING:
    from monitor.api.sessions import SessionSigner

__all__ = [
    "PUBLIC_PATHS",
    "PUBLIC_PREFIXES",
    "SESSION_COOKIE",
    "AuthMiddleware",
    "DevModeMiddleware",
    "Principal",
    "TokenScope",
    "TokenStore",
    "required_scope",
]

#: Paths served without a token: the liveness probe, the API's own documentation and the
#: browser login.
PUBLIC_PATHS = frozenset(
    {"/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/favicon.ico", "/login",
     "/logout"}
)
#: The browser session's cookie (:mod:`monitor.api.sessions`).
SESSION_COOKIE = "monitor_session"
#: Path prefixes served without a token: the documentation's static files.
PUBLIC_PREFIXES = ("/docs/assets/",)

_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DIGEST = re.compile(r"^sha256:([0-9a-fA-F]{64})$")
REALM = 'Bearer realm="monitor"'


class TokenScope(StrEnum):
    """What a token may do: ``read`` (GET routes) or ``write`` (every route)."""

    READ = "read"
    WRITE = "write"


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller behind a valid token.

    ``token_id`` is the first 12 hex digits of the token's SHA-256: enough to tell tokens apart
    in an audit trail (who acknowledged an alarm), useless for guessing the token.
    """

    scope: TokenScope
    token_id: str

    def can(self, needed: TokenScope) -> bool:
        return self.scope is TokenScope.WRITE or needed is TokenScope.READ


class TokenStore:
    """SHA-256 digests of the configured tokens with their scopes.

    Parameters
    ----------
    entries
        ``(scope, digest)`` pairs; ``digest`` is the 32-byte SHA-256 of a token.

    Examples
    --------
    >>> store = TokenStore.from_setting("read:abc,write:s3cret")
    >>> store.authenticate("s3cret").scope
    <TokenScope.WRITE: 'write'>
    >>> store.authenticate("nope") is None
    True
    """

    def __init__(self, entries: Iterable[tuple[TokenScope, bytes]]) -> None:
        self._entries = tuple(entries)

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def from_setting(cls, spec: str) -> TokenStore:
        """Parse ``"read:TOKEN_A,write:TOKEN_B"``; a token may be given as ``sha256:<hex>``.

        Raises
        ------
        TokenConfigError
            (a ``ValueError``) for an entry without a scope, with an unknown scope or with an
            empty token.
        """
        return cls(_parse_entry(item.strip()) for item in spec.split(",") if item.strip())

    def authenticate(self, token: str) -> Principal | None:
        """The principal of ``token``, or ``None``; every stored digest is compared."""
        digest = hashlib.sha256(token.encode("utf-8")).digest()
        found: TokenScope | None = None
        for scope, stored in self._entries:
            # No early exit: the time taken does not depend on which entry matched.
            if hmac.compare_digest(digest, stored) and found is not TokenScope.WRITE:
                found = scope
        return None if found is None else Principal(found, digest.hex()[:12])

    def scope_of(self, token_id: str) -> TokenScope | None:
        """The widest scope of the configured token whose id (:attr:`Principal.token_id`) is
        ``token_id``, or None when no configured token has it."""
        found: TokenScope | None = None
        for scope, stored in self._entries:
            if hmac.compare_digest(stored.hex()[:12], token_id) and found is not TokenScope.WRITE:
                found = scope
        return found


class TokenConfigError(MonitorError, ValueError):
    """``MONITOR_API_TOKENS`` cannot be parsed; the message names the entry (never the token)
    and says how to fix it."""


def _parse_entry(item: str) -> tuple[TokenScope, bytes]:
    scope_text, sep, token = item.partition(":")
    valid = ", ".join(s.value for s in TokenScope)
    if not sep:
        raise TokenConfigError(
            f"API token entry {_redact(item)!r} needs a scope: write SCOPE:TOKEN "
            f"with SCOPE one of {valid} in MONITOR_API_TOKENS"
        )
    try:
        scope = TokenScope(scope_text.strip().lower())
    except ValueError:
        raise TokenConfigError(
            f"unknown API token scope {scope_text!r}; valid scopes: {valid} "
            "(fix MONITOR_API_TOKENS)"
        ) from None
    token = token.strip()
    if not token:
        raise TokenConfigError(
            f"API token entry for scope {scope.value!r} has an empty token in MONITOR_API_TOKENS"
        )
    match = _DIGEST.match(token)
    digest = bytes.fromhex(match.group(1)) if match else hashlib.sha256(token.encode()).digest()
    return scope, digest


def _redact(item: str) -> str:
    return item[:3] + "…" if len(item) > 3 else "…"


def required_scope(method: str) -> TokenScope:
    """``read`` for GET, HEAD and OPTIONS; ``write`` for every method that changes something."""
    return TokenScope.READ if method.upper() in _READ_METHODS else TokenScope.WRITE


class AuthMiddleware:
    """Rejects requests without a valid token of the needed scope (401 / 403).

    On success the :class:`Principal` is put in the request state (``request.state.principal``).
    With ``sessions``, a GET/HEAD/OPTIONS request without an ``Authorization`` header may be
    authenticated by its session cookie, and a browser's page request without either is
    redirected to ``/login`` (303) instead of answered 401.
    """

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenStore,
        public_paths: frozenset[str] = PUBLIC_PATHS,
        sessions: SessionSigner | None = None,
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.public_paths = public_paths
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = _route_path(scope) if scope["type"] == "http" else ""
        if scope["type"] != "http" or path in self.public_paths or path.startswith(
            PUBLIC_PREFIXES
        ):
            await self.app(scope, receive, send)
            return
        principal, failure = self._check(scope)
        if failure is not None and failure[0] == 401 and self._wants_login_page(scope):
            await _see_login(send, scope)
            return
        if failure is not None:
            status, detail, challenge = failure
            await _reject(send, status, detail, challenge)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    def _check(self, scope: Scope) -> tuple[Principal | None, tuple[int, str, str] | None]:
        headers = Headers(scope=scope)
        header = headers.get("authorization")
        if not header and self.sessions is not None:
            principal = self._session(scope, headers)
            if principal is not None:
                return principal, None
        if not header:
            why = "missing bearer token: send the header 'Authorization: Bearer <token>'"
            if _cookie(headers, SESSION_COOKIE) is not None and required_scope(
                scope["method"]
            ) is TokenScope.WRITE:
                why += " (a browser session authenticates GET, HEAD and OPTIONS only)"
            return None, (401, why, REALM)
        kind, _, token = header.partition(" ")
        principal = self.tokens.authenticate(token.strip()) if kind.lower() == "bearer" else None
        if principal is None:
            detail = (
                "invalid bearer token"
                if kind.lower() == "bearer"
                else "unsupported authorization scheme: use 'Bearer <token>'"
            )
            return None, (401, detail, f'{REALM}, error="invalid_token"')
        needed = required_scope(scope["method"])
        if not principal.can(needed):
            return principal, (
                403,
                f"{scope['method']} {_route_path(scope)} needs a token with "
                f"the '{needed.value}' scope; this token has "
                f"'{principal.scope.value}' only",
                f'{REALM}, error="insufficient_scope", scope="{needed.value}"',
            )
        return principal, None

    def _session(self, scope: Scope, headers: Headers) -> Principal | None:
        """The principal of a valid session cookie on a read request (never on a write: a
        cookie is sent by the browser whoever made the page, a header is not)."""
        if self.sessions is None or required_scope(scope["method"]) is not TokenScope.READ:
            return None
        value = _cookie(headers, SESSION_COOKIE)
        return None if value is None else self.sessions.verify(value)

    def _wants_login_page(self, scope: Scope) -> bool:
        """A browser following a link: a GET that accepts HTML, without a bearer header."""
        headers = Headers(scope=scope)
        return (
            self.sessions is not None
            and scope["method"] == "GET"
            and "authorization" not in headers
            and "text/html" in headers.get("accept", "")
        )


def _cookie(headers: Headers, name: str) -> str | None:
    for header in headers.getlist("cookie"):
        for item in header.split(";"):
            key, sep, value = item.strip().partition("=")
            if sep and key == name:
                return value.strip('"')
    return None


async def _see_login(send: Send, scope: Scope) -> None:
    query = scope.get("query_string", b"").decode("latin-1")
    target = _route_path(scope) + (f"?{query}" if query else "")
    location = f"{scope.get('root_path', '')}/login?next={quote(target, safe='')}"
    await send(
        {
            "type": "http.response.start",
            "status": 303,
            "headers": [(b"location", location.encode()), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


async def _reject(send: Send, status: int, detail: str, challenge: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", challenge.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


#: The header every response of a server in development mode carries.
DEV_MODE_HEADER = (b"x-monitor-dev-mode", b"1")


class DevModeMiddleware:
    """Development mode (``monitor serve --dev``): every request is let through as a ``write``
    principal (``token_id`` ``"dev"``), and every response carries ``X-Monitor-Dev-Mode: 1`` so
    no one mistakes the server for a protected one."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = Principal(TokenScope.WRITE, "dev")

        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), DEV_MODE_HEADER]}
            await send(message)

        await self.app(scope, receive, marked)
