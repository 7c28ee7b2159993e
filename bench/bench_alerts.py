"""Throughput of alert delivery from the outbox, on SQLite and PostgreSQL.

A fresh database (a temporary SQLite file, and a PostgreSQL database created on the local server
and dropped afterwards) is migrated; ``--alarms`` alarms are stored with their outbox rows (one
``webhook`` receiver) in batches of 500, as the worker stores them; then ``--processes``
:class:`monitor.alerts.AlertDelivery` threads (each its own engine, as separate ``monitor serve``
processes would be; PostgreSQL only when more than one) send them to a receiver on loopback that
answers 204 at once. Reported: the time to enqueue, the deliveries per second, and that every
alarm was delivered exactly once (a claim never takes a row twice).

    python bench/bench_alerts.py                       # 2 000 alarms, 1 then 2 deliverers
    python bench/bench_alerts.py --alarms 500 --processes 1
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sqlalchemy import create_engine, func, select, text

from monitor.alerts import AlertDelivery, outbox_rows
from monitor.alerts.routing import parse_alert_routing
from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.models import AlertOutboxRow
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.streams.records import Alarm

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def receiver() -> Iterator[tuple[str, Counter[str]]]:
    keys: Counter[str] = Counter()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real receivers

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                keys[self.headers["X-Monitor-Idempotency-Key"]] += 1
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", keys
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def database(dialect: str) -> Iterator[str]:
    if dialect == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/bench.db"
        return
    name = f"bench_alerts_{uuid.uuid4().hex[:8]}"
    admin = create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield POSTGRES.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def alarms(n: int) -> list[Alarm]:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    return [Alarm("bench", "conditional", "concept_shift", f"e-{i}", i, t0 + timedelta(seconds=i),
                  max(0, i - 50), 250.0, 200.0, "shiryaev_roberts") for i in range(n)]


def run(dialect: str, n: int, processes: int) -> None:
    with database(dialect) as url, receiver() as (hook, keys):
        upgrade(url)
        routing = parse_alert_routing({
            "receivers": [{"name": "hook", "type": "webhook", "url": hook}],
            "routes": [{"receivers": ["hook"]}],
        })
        engine = make_engine(url)
        records = alarms(n)
        start = time.perf_counter()
        for i in range(0, n, 500):
            batch = records[i:i + 500]
            with session_factory(engine)() as session:
                persist_batch(session, Batch(alarms=batch), alerts=outbox_rows(batch, routing))
        enqueued = time.perf_counter() - start
        engines = [make_engine(url) for _ in range(processes)]
        deliverers = [AlertDelivery(session_factory(e), "secret", routing.delivery, poll_s=0.05)
                      for e in engines]
        start = time.perf_counter()
        for deliverer in deliverers:
            deliverer.start()
        with session_factory(engine)() as session:
            while True:
                query = select(func.count()).where(AlertOutboxRow.status == "delivered")
                if session.scalar(query) == n:
                    break
                session.rollback()
                time.sleep(0.02)
        delivered = time.perf_counter() - start
        for deliverer in deliverers:
            deliverer.close(drain_s=0)
        for e in [engine, *engines]:
            e.dispose()
        twice = sum(1 for c in keys.values() if c > 1)
        print(f"{dialect:10s} deliverers={processes}  enqueue {n} alarms: {enqueued:5.2f} s  "
              f"deliver: {delivered:5.2f} s = {n / delivered:6.0f}/s  "
              f"received {sum(keys.values())}, keys sent twice: {twice}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alarms", type=int, default=2000)
    parser.add_argument("--processes", type=int, nargs="*", default=[1, 2])
    args = parser.parse_args()
    for dialect in ("sqlite", "postgresql"):
        for processes in args.processes:
            if dialect == "sqlite" and processes > 1:
                continue  # SQLite: one process writes at a time
            run(dialect, args.alarms, processes)


if __name__ == "__main__":
    main()
