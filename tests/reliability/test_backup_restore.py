"""The backup procedures of docs/operations.md restore a database that a worker resumes from
exactly: results and offsets live in the same database, so a consistent copy taken mid-run is a
consistent (earlier) checkpoint of the whole run.

PostgreSQL: ``pg_dump -Fc`` while a worker (in a thread) commits batches, then ``pg_restore`` into
an empty database. SQLite: the online backup API (``sqlite3 monitor.db ".backup copy.db"``) while
the worker commits. A worker then resumes from the copy and finishes the replay: the results
equal one uninterrupted run's.
"""

from __future__ import annotations

import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from bench.pgcluster import find_pg_bin
from connectors import FileSource
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import Pipeline
from monitor.engine.worker import StopFlag, Worker
from monitor.streams.setup import build_monitors, read_configs
from tests.support.databases import postgres_database
from tests.support.processes import OffsetWatch, wait_until
from tests.support.streams import Example, Snapshot, reference_run, snapshot
from tests.support.workloads import build_workload, differences


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Example:
    return build_workload(tmp_path_factory.mktemp("streams"), 2000, n_streams=2, seed=21)


@pytest.fixture(scope="module")
def reference(example: Example, tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    folder = tmp_path_factory.mktemp("reference")
    return reference_run(example, f"sqlite:///{folder}/reference.db", batch_size=100)


def run_until(example: Example, url: str, lines: int) -> None:
    """A worker over the events file, from wherever the database says, up to ``lines``."""
    sink = DatabaseSink(url)
    source = FileSource(example.events)
    pipeline = Pipeline(build_monitors(read_configs(map(str, example.configs))), source.name)
    stop = StopFlag()
    worker = Worker(source, pipeline, sink, "file", batch_size=100,
                    on_batch=lambda _: stop.set() if source.position >= lines else None)
    try:
        worker.run(stop)
    finally:
        source.close()
        sink.close()


@contextmanager
def worker_thread(example: Example, url: str, copy_after: int) -> Iterator[None]:
    """A worker processing the whole file in a thread; the block runs once ``copy_after``
    records are stored, while the worker goes on committing."""
    thread = threading.Thread(target=run_until, args=(example, url, len(example.values)))
    thread.start()
    try:
        watch = OffsetWatch(url, f"file:{example.events.resolve()}")
        try:
            wait_until(lambda: watch.total() >= copy_after, "a third stored", timeout_s=120)
        finally:
            watch.close()
        yield
    finally:
        thread.join(120)
    assert not thread.is_alive()


def pg_tool(tool: str, *args: str) -> None:
    done = subprocess.run([str(find_pg_bin() / tool), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.mark.postgres
def test_pg_dump_mid_run_then_restore_resumes_exactly(
    example: Example, reference: Snapshot, postgres_admin: Engine, tmp_path: Path
) -> None:
    dump = tmp_path / "monitor.dump"
    lines = len(example.values)
    with postgres_database(postgres_admin) as live, postgres_database(postgres_admin) as copy:
        with worker_thread(example, live, lines // 3):
            pg_tool("pg_dump", "--format=custom", f"--file={dump}", libpq(live))
        pg_tool("pg_restore", "--no-owner", f"--dbname={libpq(copy)}", str(dump))
        at_backup = snapshot(copy).offsets
        assert 0 < sum(at_backup.values()) < lines
        run_until(example, copy, lines)
        assert differences(snapshot(copy), reference) == []
        assert differences(snapshot(live), reference) == []


def test_sqlite_online_backup_mid_run_then_restore_resumes_exactly(
    example: Example, reference: Snapshot, tmp_path: Path
) -> None:
    live, copy = tmp_path / "monitor.db", tmp_path / "copy.db"
    lines = len(example.values)
    with worker_thread(example, f"sqlite:///{live}", lines // 3):
        source, target = sqlite3.connect(live), sqlite3.connect(copy)
        source.backup(target)  # what `sqlite3 monitor.db ".backup copy.db"` does
        source.close()
        target.close()
    assert 0 < sum(snapshot(f"sqlite:///{copy}").offsets.values()) < lines
    run_until(example, f"sqlite:///{copy}", lines)
    assert differences(snapshot(f"sqlite:///{copy}"), reference) == []
