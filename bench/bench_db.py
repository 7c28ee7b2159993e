"""Persistence throughput: rows/s that ``persist_batch`` commits, on PostgreSQL and SQLite.

Each database is fresh (PostgreSQL: a uniquely named database created through the admin URL and
dropped afterwards; SQLite: a file in a temporary folder) and migrated with Alembic. Every batch
is one ``persist_batch`` call, i.e. one transaction, and also carries the source offset (and,
in the ``mixed`` case, a detector checkpoint), as the worker's batches do.

Cases:
  trace_points  batches of trace points only
  alarms        batches of alarms only
  replay        the same alarms again, without offsets (every row conflicts: the idempotent path)
  mixed         trace points + 1 % alarms + a 100 kB checkpoint + offsets per batch

Usage::

    .venv/bin/python bench/bench_db.py                      # both databases, defaults
    .venv/bin/python bench/bench_db.py --rows 200000 --batch 1000 --json
    .venv/bin/python bench/bench_db.py --url sqlite:////tmp/x.db   # a given database (migrated)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.streams.records import Alarm, SourceOffset, TracePoint
from monitor.streams.state import Checkpoint

POSTGRES_ADMIN_URL = os.environ.get(
    "MONITOR_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
SOURCE = "bench"


def trace_points(start: int, n: int, rng: np.random.Generator) -> list[TracePoint]:
    values = rng.normal(size=(n, 4)).tolist()
    return [
        TracePoint("bench", "conditional", i, T0 + timedelta(seconds=i), m, p, s, t, 812.4)
        for i, (m, p, s, t) in zip(range(start, start + n), values, strict=True)
    ]


def alarms(start: int, n: int, rng: np.random.Generator) -> list[Alarm]:
    stats = rng.uniform(1e4, 2e4, size=n).tolist()
    return [
        Alarm(
            stream="bench",
            detector="conditional",
            kind="concept_shift",
            event_id=f"e-{i}",
            event_index=i,
            ts=T0 + timedelta(seconds=i),
            changepoint=i - 100,
            statistic=s,
            threshold=1e4,
            rule="shiryaev_roberts",
            evidence={"covariate_statistic": 3.1, "penalised_fraction": 0.0, "weights_ess": 812.4},
        )
        for i, s in zip(range(start, start + n), stats, strict=True)
    ]


def timed(session: Session, batches: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    for batch in batches:
        persist_batch(session, Batch(**batch))
    return time.perf_counter() - started


def run_cases(url: str, rows: int, batch: int, seed: int) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    starts = range(0, rows, batch)
    engine = make_engine(url)
    results: dict[str, dict[str, float]] = {}

    def record(name: str, n_rows: int, seconds: float) -> None:
        results[name] = {"rows": n_rows, "seconds": seconds, "rows_per_s": n_rows / seconds}

    def offset(i: int) -> list[SourceOffset]:
        return [SourceOffset(SOURCE, 0, i + batch)]

    try:
        with session_factory(engine)() as session:
            traces = [
                {"trace_points": trace_points(i, batch, rng), "offsets": offset(i)} for i in starts
            ]
            record("trace_points", rows, timed(session, traces))
            alarm_batches = [
                {"alarms": alarms(i, batch, rng), "offsets": offset(rows + i)} for i in starts
            ]
            record("alarms", rows, timed(session, alarm_batches))
            # A replay re-sends results, not offsets (offsets never move back).
            replay = [{"alarms": b["alarms"]} for b in alarm_batches]
            record("replay", rows, timed(session, replay))
            state = Checkpoint("bench", 1, 0, {"log_s": 0.0}, {"ref": rng.normal(size=12_500)})
            mixed = [
                {
                    "trace_points": trace_points(2 * rows + i, batch, rng),
                    "alarms": alarms(2 * rows + i, max(1, batch // 100), rng),
                    "checkpoints": {"bench": state},
                    "offsets": offset(2 * rows + i),
                }
                for i in starts
            ]
            record("mixed", rows, timed(session, mixed))
    finally:
        engine.dispose()
    return results


@contextmanager
def fresh_database(dialect: str) -> Iterator[str]:
    if dialect == "sqlite":
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/bench.db"
        return
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"monitor_bench_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def bench(url_or_dialect: str, rows: int, batch: int, seed: int) -> dict[str, dict[str, float]]:
    if url_or_dialect in ("postgresql", "sqlite"):
        with fresh_database(url_or_dialect) as url:
            upgrade(url)
            return run_cases(url, rows, batch, seed)
    upgrade(url_or_dialect)
    return run_cases(url_or_dialect, rows, batch, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        action="append",
        help="database URL (repeatable); default: a fresh PostgreSQL and a fresh SQLite database",
    )
    parser.add_argument("--rows", type=int, default=100_000, help="rows per case")
    parser.add_argument("--batch", type=int, default=1_000, help="rows per batch (transaction)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    targets = args.url or ["postgresql", "sqlite"]
    report: dict[str, Any] = {"rows": args.rows, "batch": args.batch, "results": {}}
    for target in targets:
        name = target if target in ("postgresql", "sqlite") else make_url(target).get_backend_name()
        report["results"][name] = bench(target, args.rows, args.batch, args.seed)
    emit: Callable[[dict[str, Any]], None] = print_json if args.json else print_table
    emit(report)
    return 0


def print_json(report: dict[str, Any]) -> None:
    print(json.dumps(report, indent=2))


def print_table(report: dict[str, Any]) -> None:
    print(f"persist_batch, {report['rows']} rows per case, {report['batch']} rows per batch")
    print(f"{'database':<12}{'case':<14}{'rows/s':>12}{'seconds':>10}")
    for database, cases in report["results"].items():
        for case, r in cases.items():
            print(f"{database:<12}{case:<14}{r['rows_per_s']:>12,.0f}{r['seconds']:>10.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
