"""Three ways to insert a batch of trace points on PostgreSQL, skipping stored ones: psycopg's
``executemany`` (the store's path), one multi-row ``INSERT … VALUES``, and ``COPY`` into a
temporary table followed by ``INSERT … SELECT … ON CONFLICT DO NOTHING`` (the table created in
each transaction, or once per connection).

Each batch is one transaction (committed, as ``persist_batch`` does); the methods take turns
batch by batch on one fresh database, so that the machine's load falls on all of them alike.
Reported: the median and the lowest milliseconds per batch, and the stored rows of each method
compared (they must be identical but for their index range).

Usage::

    .venv/bin/python bench/bench_inserts.py                 # 1 000 rows per batch, 30 rounds
    .venv/bin/python bench/bench_inserts.py --rows 200 --rounds 50 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_db import fresh_database, trace_points
from monitor.db.dialect import insert, insert_missing, table_of
from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.models import TracePointRow
from monitor.db.rows import BatchRows
from monitor.engine.batch import Batch

Rows = list[dict[str, Any]]
MAX_PARAMETERS = 65_535  # PostgreSQL's limit per statement


def executemany(session: Session, rows: Rows) -> None:
    insert_missing(session, TracePointRow, rows)


def multi_values(session: Session, rows: Rows) -> None:
    per = MAX_PARAMETERS // len(rows[0])
    for start in range(0, len(rows), per):
        stmt = insert(session, TracePointRow).values(rows[start : start + per])
        session.execute(stmt.on_conflict_do_nothing())


def copy_then_insert(session: Session, rows: Rows) -> None:
    columns = list(rows[0])
    names = ", ".join(f'"{c}"' for c in columns)
    raw = session.connection().connection.driver_connection
    assert raw is not None
    with raw.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE incoming (LIKE trace_points) ON COMMIT DROP")
        with cursor.copy(f"COPY incoming ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([row[c] for c in columns])
        cursor.execute(f"INSERT INTO trace_points ({names}) SELECT {names} FROM incoming "
                       "ON CONFLICT DO NOTHING")


def copy_kept_table(session: Session, rows: Rows) -> None:
    """COPY into a temporary table created once per connection (``ON COMMIT DELETE ROWS``): no
    DDL per batch."""
    columns = list(rows[0])
    names = ", ".join(f'"{c}"' for c in columns)
    connection = session.connection()
    raw = connection.connection.driver_connection
    assert raw is not None
    with raw.cursor() as cursor:
        if not connection.info.get("incoming_trace_points"):
            cursor.execute("CREATE TEMP TABLE incoming_kept (LIKE trace_points) "
                           "ON COMMIT DELETE ROWS")
            connection.info["incoming_trace_points"] = True
        with cursor.copy(f"COPY incoming_kept ({names}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([row[c] for c in columns])
        cursor.execute(f"INSERT INTO trace_points ({names}) SELECT {names} FROM incoming_kept "
                       "ON CONFLICT DO NOTHING")


METHODS: dict[str, Callable[[Session, Rows], None]] = {
    "executemany": executemany, "multi_values": multi_values, "copy": copy_then_insert,
    "copy_kept_table": copy_kept_table,
}


def stored(session: Session, start: int, n: int) -> list[tuple[Any, ...]]:
    table = table_of(TracePointRow)
    skip = {"created_at", "event_index"}
    query = (select(*[c for c in table.c if c.name not in skip])
             .where(table.c.event_index >= start, table.c.event_index < start + n)
             .order_by(table.c.event_index))
    with session.begin():
        return [tuple(r) for r in session.execute(query)]


def run(url: str, n: int, rounds: int, seed: int) -> dict[str, Any]:
    upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    first: dict[str, int] = {}
    start = 0
    with sessions() as session:
        for k in range(rounds):
            for name, method in METHODS.items():
                # The same values for every method of a round, at its own event indices.
                points = [replace(p, event_index=start + p.event_index)
                          for p in trace_points(0, n, np.random.default_rng([seed, k]))]
                rows = BatchRows.of(Batch(trace_points=points)).trace_points
                first.setdefault(name, start)
                began = time.perf_counter()
                with session.begin():
                    method(session, rows)
                times[name].append(1e3 * (time.perf_counter() - began))
                start += n
        same = len({tuple(stored(session, first[m], n)) for m in METHODS}) == 1
    engine.dispose()
    return {"rows": n, "rounds": rounds, "identical_rows": same,
            **{m: {"median_ms": statistics.median(t), "min_ms": min(t)} for m, t in times.items()}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with fresh_database("postgresql") as url:
        report = run(url, args.rows, args.rounds, args.seed)
    print(json.dumps(report) if args.json else "\n".join(f"{k:>15}: {v}"
                                                         for k, v in report.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
