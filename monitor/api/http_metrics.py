"""HTTP request metrics of the API, as an ASGI middleware.

- ``monitor_http_requests_total{method,route,status}``: requests answered
- ``monitor_http_request_seconds{method,route}``: histogram of the time to the response's end

``route`` is the matched route's *template* (``/alarms/{alarm_id}``), never the raw path, and
``unmatched`` for a path no route serves; ``method`` is one of the HTTP methods the API knows,
else ``other``: the labels stay bounded whatever clients send. Requests refused before routing
(401, 413) are counted under the route they asked for.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.routing import compile_path
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HttpMetricsMiddleware"]

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class HttpMetricsMiddleware:
    """Counts and times every HTTP request into ``registry``.

    Parameters
    ----------
    app
        The wrapped application.
    registry
        Where the two metrics are registered (the app's ``/metrics`` registry).
    templates
        Returns the application's path templates (e.g. its OpenAPI paths), read once, to find
        the template of a request refused before routing.
    """

    def __init__(
        self,
        app: ASGIApp,
        registry: CollectorRegistry,
        templates: Callable[[], Iterable[str]],
    ) -> None:
        self.app = app
        self.templates = templates
        self._patterns: list[tuple[re.Pattern[str], str]] | None = None
        self.requests = Counter(
            "monitor_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.seconds = Histogram(
            "monitor_http_request_seconds",
            "Seconds from a request's arrival to the end of its response.",
            ["method", "route"],
            buckets=_BUCKETS,
            registry=registry,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]  # an exception without a response is answered 500 by the server

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            method = scope.get("method", "")
            method = method if method in METHODS else "other"
            route = self._route(scope)
            self.requests.labels(method, route, str(status[0])).inc()
            self.seconds.labels(method, route).observe(time.perf_counter() - start)

    def _route(self, scope: Scope) -> str:
        matched = scope.get("route")
        path = getattr(matched, "path", None)
        if isinstance(path, str):
            return path
        if self._patterns is None:  # refused before routing: match the templates ourselves
            # Templates without parameters first: /a/b wins over /a/{x}, as in routing.
            ordered = sorted(set(self.templates()), key=lambda t: ("{" in t, t))
            self._patterns = [(compile_path(t)[0], t) for t in ordered]
        path = str(scope.get("path", ""))
        for pattern, template in self._patterns:
            if pattern.match(path):
                return template
        return UNMATCHED
