"""Request body size limit: 413 before a large body is parsed (or, when chunked, fully read)."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from monitor.errors import MonitorError

__all__ = ["BodySizeLimitMiddleware"]


class BodyTooLarge(MonitorError):
    """Raised inside the middleware when a chunked body passes the limit."""


class BodySizeLimitMiddleware:
    """Answers 413 to requests whose body exceeds ``max_bytes``.

    A declared ``Content-Length`` is checked before anything is read. A body without one
    (chunked transfer) is read up to the limit and buffered, then replayed to the application,
    so the application never sees a partial body.

    Parameters
    ----------
    app
        The wrapped application.
    max_bytes
        Largest accepted body, in bytes.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._reject(send, declared)
            return
        if declared is not None:
            await self.app(scope, receive, send)
            return
        try:
            messages = await self._buffer(receive)
        except BodyTooLarge:
            await self._reject(send, None)
            return
        await self.app(scope, _replay(messages, receive), send)

    async def _buffer(self, receive: Receive) -> list[Message]:
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                raise BodyTooLarge
            if not message.get("more_body", False):
                return messages

    async def _reject(self, send: Send, declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else "the body"
        detail = f"request body too large: {size} exceeds the limit of {self.max_bytes} bytes"
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay
