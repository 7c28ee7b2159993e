"""Connection guard of ``monitor serve``: slow or idle clients cannot starve the others.

uvicorn times out idle keep-alive connections but not a request whose headers (or body) never
finish, so about as many such connections as the process may open file descriptors made every
other client fail (accept fails with ``EMFILE``). :class:`GuardedHttpToolsProtocol` (uvicorn's
httptools protocol) adds:

- a **header timeout**: a connection whose request headers are not complete
  ``header_timeout`` seconds after it opened (or after its next request began) is closed;
- a **body timeout**: a request whose body is not complete ``body_timeout`` seconds after its
  headers is closed;
- a **header size limit**: more than ``max_header_bytes`` before the headers end closes the
  connection;
- a **connection cap** below the file-descriptor limit: when a new connection would exceed
  it, the connection that has waited longest for its headers or body is closed to make room
  (connections busy in the app or idle between keep-alive requests are not), so a well-behaved
  client always gets in; only if none is waiting is the new connection closed.

Limits are per process (each ``--workers`` process has its own). See docs/operations.md
"The API under abuse".
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["GuardLimits", "GuardedHttpToolsProtocol", "configure", "limits"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GuardLimits:
    """Limits of one server process (``MONITOR_API_*`` settings)."""

    header_timeout: float = 10.0
    body_timeout: float = 60.0
    max_header_bytes: int = 64 * 1024
    max_connections: int = 10_000
    #: File descriptors kept free for everything but client connections (database pool, logs).
    reserve_fds: int = 128

    def connection_cap(self) -> int:
        """``max_connections``, lowered to stay below the process's file-descriptor limit."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(16, min(self.max_connections, soft - self.reserve_fds))


_limits = GuardLimits()


def configure(new: GuardLimits) -> None:
    """Set the limits of the server of this process (before it starts)."""
    global _limits
    _limits = new


def limits() -> GuardLimits:
    return _limits


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header/body timeouts and an evicting connection cap."""

    #: Connections waiting for their headers or body, oldest first (one server per process).
    waiting: ClassVar[OrderedDict[GuardedHttpToolsProtocol, None]] = OrderedDict()
    closed_slow: ClassVar[int] = 0
    evicted: ClassVar[int] = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = _limits
        self._cap = _limits.connection_cap()
        self._timer: asyncio.TimerHandle | None = None
        self._header_bytes: int | None = None  # counted while the headers are incomplete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._cap and not self._evict_one():
            transport.close()  # everyone else is being served: refuse this one
            return
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_bytes is not None:
            self._header_bytes += len(data)
            if self._header_bytes > self._limits.max_header_bytes:
                self._close("headers over the size limit")
                return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_bytes is None:  # a next request on a kept-alive connection
            self._await_headers()

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        self._header_bytes = None
        self._wait(self._limits.body_timeout, "request body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stop_waiting()
        super().on_message_complete()

    # -- internals ---------------------------------------------------------------------------

    def _await_headers(self) -> None:
        self._header_bytes = 0
        self._wait(self._limits.header_timeout, "request headers")

    def _wait(self, seconds: float, what: str) -> None:
        self._stop_waiting()
        self.waiting[self] = None
        self._timer = self.loop.call_later(seconds, self._expire, what)

    def _stop_waiting(self) -> None:
        self.waiting.pop(self, None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, what: str) -> None:
        self._timer = None
        type(self).closed_slow += 1
        self._close(f"{what} not complete in time")

    def _close(self, why: str) -> None:
        self._stop_waiting()
        if not self.transport.is_closing():
            log.debug("closing connection from %s: %s", self.client, why)
            self.transport.close()

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for its headers or body."""
        for other in self.waiting:
            if other is not self:
                type(self).evicted += 1
                other._close("evicted: the connection cap is reached")
                return True
        return False
