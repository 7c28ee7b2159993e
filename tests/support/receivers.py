"""A real HTTP receiver on loopback for alert and webhook delivery tests: records every request
and answers each path with a scripted list of statuses (the last one repeats; ``default`` for a
path without a script), after ``delay`` seconds; a 429 says ``Retry-After: 0``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    script: dict[str, list[int]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0
    default: int = 204
    delay: float = 0.0
    #: Requests are answered only while this is set (clear it to hold them, up to 30 s).
    open: threading.Event = field(default_factory=threading.Event)
    #: Requests answered so far.
    answered: int = 0

    def __post_init__(self) -> None:
        self.open.set()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def on(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def answer(self, path: str) -> int:
        with self.lock:
            statuses = self.script.get(path, [self.default])
            return statuses.pop(0) if len(statuses) > 1 else statuses[0]


@contextmanager
def running_receiver(default: int = 204) -> Iterator[Receiver]:
    state = Receiver(default=default)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with state.lock:
                state.received.append(
                    Received(self.path, dict(self.headers), body, time.monotonic())
                )
            state.open.wait(30)
            time.sleep(state.delay)
            status = state.answer(self.path)
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            with state.lock:
                state.answered += 1

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
