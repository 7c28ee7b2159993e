"""Storage per million events, and what pruning it costs, on PostgreSQL (and SQLite).

A fresh database receives the bundled example stream (river's Shuttle data, one event a second,
labels 5 events late) through ``monitor.cli.runs.run_source`` — the worker's path, with the
default ``trace_every`` (10) and OOD windows — and the bench prints each table's size on disk
per million events (PostgreSQL: ``pg_total_relation_size``, indexes and TOAST included; SQLite:
``dbstat``). Then it prunes every trace point with ``monitor.db.retention.prune`` (batches of
5 000 rows, one transaction each) and prints the rows deleted per second beside the rows per
second the same run inserted, which is what decides whether time partitions (dropping a
partition instead of deleting rows) would pay.

Usage::

    .venv/bin/python bench/bench_storage.py                 # PostgreSQL, 30 000 events
    .venv/bin/python bench/bench_storage.py --events 100000 --json
    .venv/bin/python bench/bench_storage.py --sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.cli.runs import register_stream, run_source
from monitor.db.engine import make_engine, session_factory
from monitor.db.models import TracePointRow
from monitor.db.retention import prune
from monitor.ops.datasets import build_example
from monitor.settings import Settings

ADMIN = os.environ.get(
    "MONITOR_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TABLES = ("trace_points", "ood_windows", "ood_flags", "alarms", "dead_letters")


def _sizes(url: str) -> dict[str, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                return {t: int(conn.scalar(text(f"SELECT pg_total_relation_size('{t}')")) or 0)
                        for t in TABLES}
            rows = conn.execute(text("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")).all()
            sizes = dict.fromkeys(TABLES, 0)
            for name, size in rows:  # a table and its indexes (sqlite_autoindex_<t>_N, ix_<t>_…)
                for t in TABLES:
                    if name == t or name.startswith((f"ix_{t}_", f"sqlite_autoindex_{t}_")):
                        sizes[t] += int(size)
            return sizes
    finally:
        engine.dispose()


def _count(url: str, table: str) -> int:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.scalar(text(f"SELECT count(*) FROM {table}")) or 0)
    finally:
        engine.dispose()


def measure(url: str, events: int, folder: Path, synthetic: int) -> dict[str, Any]:
    paths = build_example(
        folder, seed=0, n_calibration=1000, label_delay=5,
        phases=[("stable", events // 2), ("concept", events - events // 2)],
    )
    config = paths["config"]
    # keep every trace point while measuring; the prune below applies a zero-length policy
    settings = Settings(database_url=url, retention_interval=0)
    register_stream(str(config), settings)
    start = time.perf_counter()
    run_source(f"file:{paths['events']}", [], "storage", settings)
    run_s = time.perf_counter() - start
    sizes = _sizes(url)
    traces = _count(url, "trace_points")
    prune_rate = _prune_rate(url, synthetic)
    return {
        "database": make_url(url).get_backend_name(),
        "events": events,
        "bytes_per_million_events": {t: round(b * 1e6 / events) for t, b in sizes.items()},
        "total_mb_per_million_events": round(sum(sizes.values()) * 1e6 / events / 2**20, 1),
        "trace_points_per_million_events": round(traces * 1e6 / events),
        "events_per_s_through_the_worker": round(events / run_s),
        **prune_rate,
    }


def _prune_rate(url: str, rows: int) -> dict[str, Any]:
    """Insert ``rows`` synthetic trace points (one stream, two detectors, a second apart), then
    prune all but the newest hour in batches of 5 000: rows deleted per second."""
    engine = make_engine(url)
    try:
        t0 = datetime(2020, 1, 1, tzinfo=UTC)
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO streams (name, task, config, version) "
                              "VALUES ('synthetic', 'regression', :c, 1)"),
                         {"c": json.dumps({"retention": {"trace_points": 3600,
                                                         "alarm_context": 0}})})
            for lo in range(0, rows // 2, 50_000):
                conn.execute(insert(TracePointRow), [
                    {"stream": "synthetic", "detector": d, "event_index": i,
                     "ts": t0 + timedelta(seconds=i), "log_martingale": 0.0, "p_value": 0.5,
                     "log_statistic": 0.0, "log_threshold": 9.2}
                    for i in range(lo, min(lo + 50_000, rows // 2))
                    for d in ("covariate", "conditional")
                ])
        start = time.perf_counter()
        report = prune(session_factory(engine), batch=5000)
        seconds = time.perf_counter() - start
    finally:
        engine.dispose()
    return {
        "synthetic_trace_rows": rows,
        "trace_rows_pruned": report.deleted["trace_points"],
        "prune_transactions": report.transactions,
        "trace_rows_pruned_per_s": round(report.deleted["trace_points"] / seconds),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL")
    parser.add_argument("--prune-rows", type=int, default=1_000_000,
                        help="synthetic trace points inserted, then pruned")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        if args.sqlite:
            result = measure(f"sqlite:///{folder}/storage.db", args.events, Path(folder),
                             args.prune_rows)
        else:
            name = f"monitor_bench_{uuid.uuid4().hex[:12]}"
            admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            try:
                url = make_url(ADMIN).set(database=name).render_as_string(hide_password=False)
                result = measure(url, args.events, Path(folder), args.prune_rows)
            finally:
                with admin.connect() as conn:
                    conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.dispose()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:32s} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
