"""Checkpoint cost per batch: the bytes a stream's checkpoint sends to the database, the time
of the transaction that stores it, and the statements of the one-writer check.

The example stream (Shuttle, the demo's configuration) is run through the pipeline for
``--events`` events in batches of ``--batch``; then ``--checkpoints`` batches are processed, each
followed by one ``persist_batch`` of the stream's checkpoint alone (with its offset, a file
writer's fencing, as the worker stores it), on a fresh PostgreSQL database (or ``--url``).
Bytes are the sizes of the ``bytes`` and ``str`` parameters of every statement executed
(``before_cursor_execute``), so they count what crosses the wire, whatever the schema.

Usage::

    .venv/bin/python bench/bench_checkpoint.py                    # 10 000 events, PostgreSQL
    .venv/bin/python bench/bench_checkpoint.py --events 100000 --json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import event

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_db import fresh_database
from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch, Fencing, checkpoints
from monitor.engine.pipeline import Pipeline, RawRecord
from monitor.ops.datasets import build_example
from monitor.streams.records import SourceOffset
from monitor.streams.setup import build_monitors, read_configs


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_size(v) for v in value)
    try:  # bytes, or the driver's wrapper of them
        return memoryview(getattr(value, "obj", value)).nbytes
    except TypeError:
        return 0


@contextmanager
def counted(engine: Any) -> Iterator[dict[str, int]]:
    """Statements and parameter bytes sent on ``engine`` while the block runs."""
    seen = {"statements": 0, "bytes": 0}

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        if statement.strip().upper().startswith(("BEGIN", "COMMIT", "ROLLBACK")):
            return
        seen["statements"] += 1
        seen["bytes"] += _size(parameters)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


def run(url: str, events: int, batch: int, n_checkpoints: int) -> dict[str, Any]:
    folder = tempfile.TemporaryDirectory()
    paths = build_example(folder.name, seed=3,
                          phases=(("stable", events + batch * n_checkpoints),))
    config = yaml.safe_load(paths["config"].read_text())
    paths["config"].write_text(yaml.safe_dump(config))
    stream = read_configs([str(paths["config"])])[0]
    pipeline = Pipeline(build_monitors([stream]), "file:events")
    lines = paths["events"].read_bytes().splitlines()
    records = [RawRecord("events", 0, i, v) for i, v in enumerate(lines)]
    for i in range(0, events, batch):
        pipeline.process(records[i : i + batch])
    upgrade(url)
    engine = make_engine(url)
    sessions = session_factory(engine)
    fencing = Fencing("file:events", "", streams=[stream.name])
    sizes, statements, seconds = [], [], []
    for k in range(n_checkpoints):
        start = events + k * batch
        pipeline.process(records[start : start + batch])
        states = {stream.name: pipeline.streams[stream.name].state_dict()}
        stored = Batch(checkpoints=checkpoints(states), fencing=fencing,
                       offsets=[SourceOffset("file:events", 0, start + batch)])
        with sessions() as session, counted(engine) as seen:
            began = time.perf_counter()
            persist_batch(session, stored)
            seconds.append(time.perf_counter() - began)
        sizes.append(seen["bytes"])
        statements.append(seen["statements"])
    engine.dispose()
    folder.cleanup()
    later = seconds[1:]
    return {"events": events, "batch": batch, "first_bytes": sizes[0],
            "later_bytes_median": statistics.median(sizes[1:]),
            "first_ms": 1e3 * seconds[0], "later_ms_median": 1e3 * statistics.median(later),
            "later_ms_min": 1e3 * min(later), "statements_per_batch": statements[1:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--checkpoints", type=int, default=11)
    parser.add_argument("--url", help="a database URL (default: a fresh PostgreSQL database)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.url:
        report = run(args.url, args.events, args.batch, args.checkpoints)
    else:
        with fresh_database("postgresql") as url:
            report = run(url, args.events, args.batch, args.checkpoints)
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:>22}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
