"""Latency of the HTTP API under load, and a long schemathesis run.

Latency (default): a fresh PostgreSQL database is migrated and bulk-loaded with COPY (100 000
alarms and 1 000 000 trace points over 20 streams by default), the API is started as a real
uvicorn server in its own process, and an open-loop load generator on loopback sends
``GET /alarms`` requests at a fixed rate (200/s by default): a mix of filters (stream, kind,
detector, time range, acknowledged) and of deeper pages reached with the cursors of earlier
pages. Reported: p50/p90/p99/max of the service time (request sent → answer read) and of the
time from each request's scheduled start (which also counts any lateness of the generator, so
a stalled server cannot hide behind a slowed-down client), errors and the achieved rate. A short
second run measures ``GET /streams/{name}/trace`` (downsampling) at a lower rate. Both runs are
repeated for each ``--workers`` count (default: 1, then 2 processes of ``monitor serve``); the CPU
time per request of the server processes (supervisor and workers) is reported.

    python bench/bench_api.py                      # the figures of docs/api.md
    python bench/bench_api.py --duration 10 --alarms 20000 --trace-points 200000   # quick look
    python bench/bench_api.py --fuzz 200           # schemathesis, 200 examples per operation

The database is dropped afterwards (``--keep`` keeps it). Goal: p99 < 50 ms at 200 requests/s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import numpy as np
import psycopg
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.db.engine import make_engine, session_factory  # noqa: E402
from monitor.db.migrate import upgrade  # noqa: E402
from monitor.db.queries import create_stream  # noqa: E402
from monitor.streams.config import StreamConfig  # noqa: E402
from monitor.streams.records import ALARM_KINDS, alarm_id  # noqa: E402

ADMIN_URL = os.environ.get(
    "MONITOR_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TOKEN = "bench-read-token"
T0 = datetime(2026, 11, 1, tzinfo=UTC)
DETECTORS = ("covariate", "conditional", "ood")


# --- database ---------------------------------------------------------------------------------


@contextmanager
def fresh_database(admin_url: str, keep: bool) -> Iterator[str]:
    """A new migrated database; dropped afterwards unless ``keep``."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"monitor_bench_{os.getpid()}_{int(time.time())}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        if keep:
            print(f"kept database {url}", file=sys.stderr)
        else:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def register_streams(url: str, names: list[str]) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    rows = [
        {"features": r.tolist(), "prediction": float(r.sum()), "label": float(r.sum())} for r in x
    ]
    engine = make_engine(url)
    with session_factory(engine)() as session:
        for name in names:
            config = StreamConfig(name=name, task="regression", calibration=[])
            create_stream(session, config, rows)
    engine.dispose()


def load_alarms(url: str, streams: list[str], n: int, seed: int) -> None:
    """``n`` alarms, one every ~25 s from T0, round-robin over streams and detectors."""
    rng = random.Random(seed)
    evidence = json.dumps(
        {"covariate_statistic": 3.1, "penalised_fraction": 0.0, "weights_ess": 812.4}
    )
    columns = (
        "id, stream, detector, kind, event_id, event_index, ts, changepoint, statistic, "
        "threshold, rule, evidence, acknowledged_at, acknowledged_by, created_at"
    )
    with (
        psycopg.connect(_libpq(url)) as conn,
        conn.cursor() as cur,
        cur.copy(f"COPY alarms ({columns}) FROM STDIN") as copy,
    ):
        for i in range(n):
            stream, detector = streams[i % len(streams)], DETECTORS[(i // len(streams)) % 3]
            ts = T0 + timedelta(seconds=25 * i + rng.random())
            acked = rng.random() < 0.3
            copy.write_row(
                (
                    alarm_id(stream, detector, i),
                    stream,
                    detector,
                    rng.choice(ALARM_KINDS),
                    f"e-{i}",
                    i,
                    ts,
                    max(0, i - rng.randrange(500)),
                    1e4 + rng.random() * 1e3,
                    1e4,
                    "shiryaev_roberts",
                    evidence,
                    ts if acked else None,
                    "alice" if acked else None,
                    ts,
                )
            )


def load_trace_points(url: str, streams: list[str], n: int) -> None:
    """``n`` trace points split evenly over streams × (covariate, conditional)."""
    per = n // (2 * len(streams))
    copy_sql = (
        "COPY trace_points (stream, detector, event_index, ts, log_martingale, p_value, "
        "log_statistic, log_threshold, weights_ess) FROM STDIN"
    )
    with psycopg.connect(_libpq(url)) as conn, conn.cursor() as cur, cur.copy(copy_sql) as copy:
        for s, stream in enumerate(streams):
            rng = np.random.default_rng(s)
            walk = np.cumsum(rng.normal(scale=0.1, size=per))
            for detector in ("covariate", "conditional"):
                for k in range(per):
                    copy.write_row(
                        (
                            stream,
                            detector,
                            10 * k,
                            T0 + timedelta(seconds=10 * k),
                            float(walk[k]),
                            float(rng.random()),
                            float(walk[k]),
                            9.21,
                            None if detector == "covariate" else 800.0,
                        )
                    )


def vacuum_analyze(url: str) -> None:
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


# --- server -----------------------------------------------------------------------------------


@contextmanager
def api_server(url: str, workers: int) -> Iterator[tuple[str, int]]:
    """``monitor serve --workers N`` in a child process (no access log); yields its base URL and
    process id (the workers are its children)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = "import sys; from monitor.cli.main import main; sys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, "serve", "--host", "127.0.0.1", "--port", str(port)]
    env = os.environ | {
        "MONITOR_DATABASE_URL": url,
        "MONITOR_API_TOKENS": f"read:{TOKEN}",
        "MONITOR_AUTO_MIGRATE": "false",
        "MONITOR_API_WORKERS": str(workers),
        "MONITOR_API_ACCESS_LOG": "false",
        "MONITOR_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    process = subprocess.Popen(command, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, process)
        yield base, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait_healthy(base: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the API server exited during startup")
        try:
            if httpx.get(f"{base}/health", timeout=1.0).json().get("database") == "ok":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the API server did not become healthy")


# --- load -------------------------------------------------------------------------------------


def alarm_filters(streams: list[str], n_alarms: int, rng: random.Random) -> list[dict[str, Any]]:
    """Filter sets of GET /alarms as dashboards and scripts send them."""
    span = timedelta(seconds=25 * n_alarms)

    def window(days: int) -> dict[str, str]:
        start = T0 + span * rng.random() * 0.8
        return {"since": start.isoformat(), "until": (start + timedelta(days=days)).isoformat()}

    out: list[dict[str, Any]] = []
    for _ in range(8):
        stream, kind = rng.choice(streams), rng.choice(ALARM_KINDS)
        out += [
            {"limit": 100},
            {"stream": stream, "limit": 50},
            {"stream": stream, "kind": kind, "limit": 50},
            {"kind": kind, "limit": 100} | window(7),
            {
                "stream": stream,
                "detector": rng.choice(DETECTORS),
                "acknowledged": "false",
                "limit": 20,
            },
            {"limit": 100} | window(2),
        ]
    return out


def with_cursors(base: str, filters: list[dict[str, Any]], pages: int) -> list[dict[str, Any]]:
    """Each filter set, plus its pages 2..``pages`` (cursors collected now, replayed under load)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    out = []
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        for params in filters:
            out.append(params)
            cursor = client.get("/alarms", params=params).json()["next_cursor"]
            for _ in range(pages - 1):
                if cursor is None:
                    break
                out.append(params | {"cursor": cursor})
                cursor = client.get("/alarms", params=out[-1]).json()["next_cursor"]
    return out


@dataclass
class Samples:
    service: list[float] = field(default_factory=list)
    scheduled: list[float] = field(default_factory=list)
    errors: int = 0
    sent: int = 0
    seconds: float = 0.0

    def record(self, status: int, service: float, scheduled: float) -> None:
        self.sent += 1
        if status != 200:
            self.errors += 1
            return
        self.service.append(service)
        self.scheduled.append(scheduled)

    def summary(self) -> dict[str, Any]:
        def pct(values: list[float]) -> dict[str, float]:
            if not values:
                return {}
            a = np.asarray(values) * 1000.0
            return {
                "p50_ms": round(float(np.percentile(a, 50)), 2),
                "p90_ms": round(float(np.percentile(a, 90)), 2),
                "p99_ms": round(float(np.percentile(a, 99)), 2),
                "max_ms": round(float(a.max()), 2),
            }

        return {
            "requests": self.sent,
            "errors": self.errors,
            "achieved_rate": round(self.sent / self.seconds, 1) if self.seconds else 0.0,
            "service": pct(self.service),
            "from_schedule": pct(self.scheduled),
        }


async def open_loop(
    base: str,
    path: str,
    requests: list[dict[str, Any]],
    rate: float,
    duration: float,
    warmup: float,
    seed: int,
    connections: int = 32,
) -> Samples:
    """Send ``rate`` requests/s for ``warmup + duration`` s over ``connections`` keep-alive
    connections (wrk2 style): request ``i`` is due at ``start + i / rate`` whatever the previous
    answers, and its latency is also measured from that due time, so a server that falls behind
    shows it even when every connection is busy. Samples from the warm-up are discarded."""
    rng = random.Random(seed)
    total = int((warmup + duration) * rate)
    queue: asyncio.Queue[tuple[float, bytes, bool] | None] = asyncio.Queue()
    host, port = base.removeprefix("http://").split(":")
    samples = Samples()
    workers = [
        asyncio.create_task(_connection(host, int(port), queue, samples))
        for _ in range(connections)
    ]
    start = time.perf_counter() + 0.2
    for i in range(total):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait((due, _request(path, rng.choice(requests), host), i >= warmup * rate))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    samples.seconds = duration
    return samples


def _request(path: str, params: dict[str, Any], host: str) -> bytes:
    target = f"{path}?{urlencode(params)}" if params else path
    return (
        f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Accept: application/json\r\n\r\n"
    ).encode()


async def _connection(
    host: str, port: int, queue: asyncio.Queue[tuple[float, bytes, bool] | None], samples: Samples
) -> None:
    """One keep-alive connection taking due requests from ``queue`` until it gets ``None``."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while (job := await queue.get()) is not None:
            due, request, measured = job
            sent = time.perf_counter()
            writer.write(request)
            status = await _read_response(reader)
            done = time.perf_counter()
            if measured:
                samples.record(status, done - sent, done - due)
    finally:
        writer.close()


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(
        int(h.split(":", 1)[1]) for h in lines[1:] if h.lower().startswith("content-length:")
    )
    await reader.readexactly(length)
    return int(lines[0].split()[1])


# --- main -------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux ``/proc``); 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (``monitor serve``'s supervisor and its workers)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            todo += [int(child) for child in task.read_text().split()]
    return out


def total_cpu(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


@contextmanager
def bench_database(args: argparse.Namespace, streams: list[str]) -> Iterator[tuple[str, float]]:
    """The loaded database (``--reuse``: one kept by an earlier ``--keep`` run) and load time."""
    if args.reuse:
        yield args.reuse, 0.0
        return
    with fresh_database(args.admin_url, args.keep) as url:
        started = time.perf_counter()
        register_streams(url, streams)
        load_alarms(url, streams, args.alarms, args.seed)
        load_trace_points(url, streams, args.trace_points)
        vacuum_analyze(url)
        seconds = time.perf_counter() - started
        print(
            f"loaded {args.alarms} alarms and {args.trace_points} trace points in {seconds:.1f} s",
            file=sys.stderr,
        )
        yield url, seconds


def latency(args: argparse.Namespace) -> dict[str, Any]:
    """Both loads against ``monitor serve`` with each worker count of ``args.workers``; the
    top-level figures are those of the last (largest) worker count."""
    streams = [f"stream-{k:02d}" for k in range(args.streams)]
    with bench_database(args, streams) as (url, load_seconds):
        runs = {str(n): latency_run(args, url, streams, n) for n in args.workers}
    last = runs[str(args.workers[-1])]
    return {
        "alarms": args.alarms,
        "trace_points": args.trace_points,
        "streams": args.streams,
        "load_seconds": round(load_seconds, 1),
        "rate": args.rate,
        "duration": args.duration,
        "workers": last["workers"],
        "distinct_alarm_queries": last["distinct_alarm_queries"],
        "get_alarms": last["get_alarms"],
        "get_trace": last["get_trace"],
        "by_workers": runs,
    }


def latency_run(
    args: argparse.Namespace, url: str, streams: list[str], workers: int
) -> dict[str, Any]:
    """``GET /alarms`` at ``args.rate`` and ``GET /streams/{name}/trace`` at
    ``args.trace_rate`` against one server with ``workers`` processes."""
    rng = random.Random(args.seed)
    with api_server(url, workers) as (base, pid):
        requests = with_cursors(base, alarm_filters(streams, args.alarms, rng), args.pages)
        server = process_tree(pid)
        load_before = os.getloadavg()[0]
        server_before = total_cpu(server)
        alarms = asyncio.run(
            open_loop(base, "/alarms", requests, args.rate, args.duration, args.warmup, args.seed)
        )
        sent = int((args.warmup + args.duration) * args.rate)
        server_cpu_ms = (total_cpu(server) - server_before) / sent * 1000.0
        load_after = os.getloadavg()[0]
        trace_requests: list[dict[str, Any]] = [
            {"max_points": 1000},
            {"max_points": 500, "detector": "covariate"},
        ]
        trace = asyncio.run(
            open_loop(
                base,
                f"/streams/{streams[0]}/trace",
                trace_requests,
                args.trace_rate,
                args.trace_duration,
                1.0,
                args.seed,
            )
        )
    print(f"{workers} worker(s): GET /alarms {alarms.summary()['service']}", file=sys.stderr)
    return {
        "workers": workers,
        "distinct_alarm_queries": len(requests),
        "get_alarms": alarms.summary()
        | {
            "server_cpu_ms_per_request": round(server_cpu_ms, 2),
            "machine_load_1min": [round(load_before, 2), round(load_after, 2)],
        },
        "get_trace": trace.summary() | {"rate": args.trace_rate},
    }


def fuzz(args: argparse.Namespace) -> int:
    from bench import schemathesis_run
    from bench.api_rows import WRITE, make_settings, seed
    from monitor.api import create_app

    with fresh_database(args.admin_url, args.keep) as url:
        engine = make_engine(url)
        with session_factory(engine)() as session:
            seed(session)
        engine.dispose()
        app = create_app(make_settings(url, max_body_bytes=256 * 2**20))
        report = schemathesis_run.run(app, WRITE, max_examples=args.fuzz, seed=args.seed)
    print(report.summary())
    return 1 if report.failures or report.errors else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--admin-url",
        default=ADMIN_URL,
        help="PostgreSQL URL used to create and drop the bench database",
    )
    parser.add_argument("--alarms", type=int, default=100_000)
    parser.add_argument("--trace-points", type=int, default=1_000_000)
    parser.add_argument("--streams", type=int, default=20)
    parser.add_argument("--rate", type=float, default=200.0, help="GET /alarms requests per second")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds first")
    parser.add_argument("--pages", type=int, default=5, help="pages per filter set (cursors)")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1, 2],
        help="worker counts of `monitor serve` to measure, one run each",
    )
    parser.add_argument("--trace-rate", type=float, default=20.0)
    parser.add_argument("--trace-duration", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the bench database")
    parser.add_argument("--reuse", metavar="URL", help="use a database kept by --keep")
    parser.add_argument(
        "--fuzz",
        type=int,
        metavar="N",
        help="run schemathesis with N examples per operation instead",
    )
    args = parser.parse_args(argv)
    if args.fuzz:
        return fuzz(args)
    result = latency(args)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
