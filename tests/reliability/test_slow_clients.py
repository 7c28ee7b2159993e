"""The API under a slow-connection flood (issue #14): connections that never finish their headers
must not stop a well-behaved client from getting ``GET /alarms`` within 1 s.

A real ``monitor serve`` process on loopback, whose file-descriptor limit is set below the number
of attacking connections (the mechanism of the reported outage: ≈ 20 000 slow connections against
the default limit of 20 000 descriptors; here scaled down so the test takes seconds). The
attacker opens its connections, sends a partial request head and then drips one header byte per
connection per second. Without the connection guard (monitor/api/guard.py) the server runs out of
descriptors and the good client's requests time out.

CI size: 1 500 connections against a limit of 1 024; ``-m slow``: 5 000 against 4 096.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine

from bench.api_rows import READ, READ_TOKEN
from tests.support.databases import postgres_database

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
HEADER_TIMEOUT = 3.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve(url: str, fd_limit: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    code = "import sys; from monitor.cli.main import main; sys.exit(main(sys.argv[1:]))"
    env = os.environ | {
        "PYTHONPATH": str(ROOT),
        "MONITOR_API_TOKENS": f"read:{READ_TOKEN}",
        "MONITOR_API_ACCESS_LOG": "false",
        "MONITOR_API_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
        "MONITOR_LOG_LEVEL": "WARNING",
    }

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (fd_limit, fd_limit))

    process = subprocess.Popen(
        [sys.executable, "-c", code, "--db", url, "serve", "--port", str(port)],
        env=env, cwd=ROOT, preexec_fn=limit, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return process, base
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise AssertionError("monitor serve did not start")


class SlowAttacker:
    """``n`` loopback connections that send a partial request head, then one byte per second."""

    def __init__(self, port: int, n: int, budget_s: float = 30.0) -> None:
        self.sockets: list[socket.socket] = []
        self.refused = 0
        started = time.monotonic()
        while len(self.sockets) + self.refused < n and time.monotonic() - started < budget_s:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=0.2)
                s.sendall(b"GET /alarms HTTP/1.1\r\nHost: monitor\r\nX-Slow: ")
                s.setblocking(False)
                self.sockets.append(s)
            except OSError:
                self.refused += 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        while not self._stop.wait(1.0):
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.send(b"a")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for s in self.sockets:
            s.close()


@pytest.fixture
def database(postgres_admin: Engine) -> Iterator[str]:
    with postgres_database(postgres_admin) as url:
        yield url


def good_client_latencies(base: str, n: int = 5) -> list[float]:
    """Seconds each of ``n`` fresh connections took to get ``GET /alarms`` (inf: failed)."""
    out = []
    for _ in range(n):
        started = time.monotonic()
        try:
            with httpx.Client(timeout=2.0) as client:
                ok = client.get(f"{base}/alarms", headers=READ).status_code == 200
        except httpx.HTTPError:
            ok = False
        out.append(time.monotonic() - started if ok else float("inf"))
        time.sleep(0.2)
    return out


def run_flood(database: str, connections: int, fd_limit: int) -> None:
    process, base = serve(database, fd_limit)
    port = int(base.rsplit(":", 1)[1])
    attacker = SlowAttacker(port, connections)
    try:
        assert len(attacker.sockets) + attacker.refused == connections
        latencies = good_client_latencies(base)
        # Every good request is answered within the client's 2 s timeout (a starved one fails:
        # inf); not a tighter bound, which would time the shared machine.
        assert all(math.isfinite(t) for t in latencies), (latencies, len(attacker.sockets))
        # The header timeout closes a connection that never finishes its headers: the server
        # closes it (recv returns b"" rather than the socket's generous liveness timeout), and
        # no sooner than the header timeout (so it is that timeout, not a refusal). No upper
        # bound: under 1 500 slow sockets on shared cores the close may come late.
        started = time.monotonic()  # before the server can start its timer (at accept)
        lone = socket.create_connection(("127.0.0.1", port), timeout=HEADER_TIMEOUT + 120)
        lone.sendall(b"GET /alarms HTTP/1.1\r\n")
        assert lone.recv(1024) == b""
        assert time.monotonic() - started >= HEADER_TIMEOUT - 0.1  # asyncio's timer resolution
        lone.close()
    finally:
        attacker.close()
        process.terminate()
        process.wait(timeout=30)


def test_slow_connections_do_not_starve_a_good_client(database: str) -> None:
    run_flood(database, connections=1_500, fd_limit=1_024)


@pytest.mark.slow
def test_five_thousand_slow_connections(database: str) -> None:
    run_flood(database, connections=5_000, fd_limit=4_096)
