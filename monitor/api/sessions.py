"""Browser sessions: an API token pasted once on ``/login`` becomes a signed, expiring cookie.

A browser cannot send ``Authorization: Bearer`` when it follows a link (a Grafana data link, a
report URL in an alert), so ``POST /login`` checks a token and sets the cookie
``monitor_session``: ``<payload>.<signature>``, the payload being the token's id (the first 12
hex digits of its SHA-256, never the token), its scope and the expiry time, the signature an
HMAC-SHA256 of the payload under the session secret (``MONITOR_SESSION_SECRET``). The cookie is
``HttpOnly`` (no script reads it), ``SameSite=Lax`` (a cross-site form post does not carry it)
and ``Secure`` on HTTPS.

The cookie authenticates GET, HEAD and OPTIONS only: a request that changes something still
needs the bearer header, so a page on another site cannot make a logged-in browser write (CSRF),
whatever the browser's SameSite rules. A session ends at its expiry (``MONITOR_SESSION_HOURS``),
at ``/logout`` (the cookie is cleared), when its token is removed from ``MONITOR_API_TOKENS``
(the id no longer matches a configured token) and when the secret changes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from monitor.api.auth import Principal, TokenScope, TokenStore

__all__ = ["SessionSigner", "safe_next"]


@dataclass(frozen=True)
class SessionSigner:
    """Issues and checks session cookie values.

    Parameters
    ----------
    secret
        The HMAC key (at least 16 bytes).
    tokens
        The configured tokens: a cookie is valid only while its token is one of them.
    max_age
        Seconds a session lasts.
    clock
        The current time in seconds since the epoch (``time.time``).

    Examples
    --------
    >>> tokens = TokenStore.from_setting("read:abc")
    >>> signer = SessionSigner(b"k" * 32, tokens, 3600, clock=lambda: 1000.0)
    >>> value = signer.issue(tokens.authenticate("abc"))
    >>> signer.verify(value).scope
    <TokenScope.READ: 'read'>
    >>> signer.verify(value[:-2] + "xx") is None
    True
    """

    secret: bytes
    tokens: TokenStore
    max_age: int
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        if len(self.secret) < 16:
            raise ValueError("the session secret must be at least 16 bytes")
        if self.max_age < 1:
            raise ValueError(f"a session must last at least 1 second, got {self.max_age}")

    def issue(self, principal: Principal) -> str:
        """A cookie value for ``principal``, valid for :attr:`max_age` seconds from now."""
        expires = int(self.clock()) + self.max_age
        body = {"t": principal.token_id, "s": principal.scope.value, "e": expires}
        payload = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"{payload}.{self._sign(payload)}"

    def verify(self, value: str) -> Principal | None:
        """The principal of a cookie value, or None: forged, edited, expired, malformed, or
        its token is no longer configured."""
        payload, _, signature = value.partition(".")
        if not hmac.compare_digest(self._sign(payload), signature):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            token_id, scope, expires = str(body["t"]), TokenScope(body["s"]), int(body["e"])
        except (binascii.Error, ValueError, TypeError, KeyError):
            return None
        if expires <= self.clock():
            return None
        current = self.tokens.scope_of(token_id)
        if current is None:
            return None
        # A token whose scope was narrowed since the login has the narrower scope now.
        narrowed = TokenScope.READ if TokenScope.READ in (current, scope) else TokenScope.WRITE
        return Principal(narrowed, token_id)

    def _sign(self, payload: str) -> str:
        digest = hmac.new(self.secret, b"monitor-session:" + payload.encode(), hashlib.sha256)
        return _b64(digest.digest())


def safe_next(target: str | None, default: str = "/docs") -> str:
    """``target`` if it is a path on this server (``/alarms/x/report?y``), else ``default``:
    the login page never redirects to another site (``//evil.example``, ``https://…``,
    ``/\\evil.example``, control characters).

    >>> safe_next("/alarms/a-1/report"), safe_next("//evil.example/x"), safe_next("https://x")
    ('/alarms/a-1/report', '/docs', '/docs')
    """
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return default
    if "\\" in target or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        return default
    parts = urlsplit(target)
    return target if not parts.scheme and not parts.netloc else default


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
