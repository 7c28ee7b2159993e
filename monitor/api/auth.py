"""Bearer tokens with ``read`` and ``write`` scopes, checked before any route runs.

Tokens come from one setting, ``MONITOR_API_TOKENS="read:TOKEN_A,write:TOKEN_B"``; ``write`` implies
``read``. Only SHA-256 digests are kept in memory (a token may also be configured as its digest,
``read:sha256:<64 hex>``, so that the plain token never sits in the environment), and a presented
token is compared with every stored digest in constant time (:func:`hmac.compare_digest`).

The check is an ASGI middleware rather than a route dependency so that it runs before the request
body is read or parsed: an unauthenticated client gets 401 whatever it sends, and a route added
later cannot forget it. GET/HEAD/OPTIONS need ``read``; every other method needs ``write``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from monitor.errors import MonitorError

__all__ = [
    "PUBLIC_PATHS",
    "AuthMiddleware",
    "Principal",
    "TokenScope",
    "TokenStore",
    "required_scope",
]

#: Paths served without a token: the liveness probe and the API's own documentation.
PUBLIC_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})

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
    """

    def __init__(
        self, app: ASGIApp, tokens: TokenStore, public_paths: frozenset[str] = PUBLIC_PATHS
    ) -> None:
        self.app = app
        self.tokens = tokens
        self.public_paths = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _route_path(scope) in self.public_paths:
            await self.app(scope, receive, send)
            return
        principal, failure = self._check(scope)
        if failure is not None:
            status, detail, challenge = failure
            await _reject(send, status, detail, challenge)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    def _check(self, scope: Scope) -> tuple[Principal | None, tuple[int, str, str] | None]:
        header = Headers(scope=scope).get("authorization")
        if not header:
            return None, (
                401,
                "missing bearer token: send the header 'Authorization: Bearer <token>'",
                REALM,
            )
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
