"""One writer per stream (issue 14): a stream is bound to the first source of writes that stores
results for it, and within a consumer group a fencing epoch refuses a zombie's transaction.

- two workers in *different* consumer groups over one topic and one database: each stream is
  written by one group only; the other group's worker logs one line per stream and stores
  nothing of the stream's records, not even dead letters (a replay would count them twice:
  tests/integration/test_refused_replay.py); every result equals one worker's run;
- a worker whose partition was assigned to another worker since (a zombie) has its transaction
  refused and stores nothing;
- ``monitor streams rebind`` moves a stream to another writer, which then proceeds from the
  stream's checkpoint.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select, text

from connectors import FileSource
from connectors.mock_kafka import produce_kafka_python
from monitor.db.engine import make_engine
from monitor.db.migrate import upgrade
from monitor.db.models import SourceOffsetRow
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import Pipeline
from monitor.engine.worker import StopFlag, Worker
from monitor.streams.setup import build_monitors, read_configs
from tests.support.processes import ROOT, WorkerProcess, group_offsets, owned, wait_until
from tests.support.streams import (
    STREAMS,
    Example,
    Snapshot,
    assert_same_results,
    end_offsets,
    snapshot,
)

pytestmark = [pytest.mark.postgres]


def stored_offsets(url: str) -> dict[str, dict[int, int]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(SourceOffsetRow.source, SourceOffsetRow.partition,
                                       SourceOffsetRow.offset)).all()
    except Exception as exc:  # the workers have not created the tables yet
        if "source_offsets" in str(exc):
            return {}
        raise
    finally:
        engine.dispose()
    out: dict[str, dict[int, int]] = {}
    for source, partition, offset in rows:
        out.setdefault(source, {})[partition] = offset
    return out


def bindings(url: str) -> dict[str, tuple[str, str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT stream, source, group_id FROM stream_writers"))
            return {r.stream: (r.source, r.group_id) for r in rows}
    finally:
        engine.dispose()


def refused_letters(snap: Snapshot) -> int:
    """Dead letters of records refused for a stream bound elsewhere (none are stored)."""
    return sum(" is bound to " in d[1] for d in snap.dead_letters)


@pytest.mark.kafka
def test_two_groups_on_one_database_write_each_stream_once(
    kafka_broker_module: str, pg_url: str, example: Example, reference: Snapshot, tmp_path: Path
) -> None:
    topic = "two-groups"
    upgrade(pg_url)
    source = f"kafka://{kafka_broker_module}/{topic}"
    a, b = (WorkerProcess.patient(tmp_path, name, pg_url, source, f"g-{name}",
                                  example.config_args, batch_size=20)
            for name in ("a", "b"))
    try:
        wait_until(lambda: len(owned(a)) == 4 and len(owned(b)) == 4, "both assigned", [a, b])
        end = end_offsets(produce_kafka_python(kafka_broker_module, topic, example.values,
                                               example.keys))

        def both_at_end() -> bool:  # (committed to Kafka once stored in the database)
            return all(group_offsets(kafka_broker_module, group, topic, range(4)) == end
                       for group in ("g-a", "g-b"))

        wait_until(both_at_end, "both groups at the end", [a, b], every_s=0.5)
        assert a.terminate() == 0, a.tail()
        assert b.terminate() == 0, b.tail()
    finally:
        for worker in (a, b):
            worker.ensure_dead()
    got = snapshot(pg_url)
    assert_same_results(got, reference)
    assert refused_letters(got) == 0
    bound = bindings(pg_url)
    assert sorted(bound) == sorted(s.name for s in STREAMS)
    assert {s for s, _ in bound.values()} == {f"kafka:{topic}"}
    logs = {"g-a": a.logs(), "g-b": b.logs()}
    for stream, (_, group) in bound.items():
        other = "g-b" if group == "g-a" else "g-a"
        line = (f"stream {stream!r} is bound to kafka:{topic} (consumer group {group!r}), not "
                f"to this writer (kafka:{topic} (consumer group {other!r}))")
        assert logs[other].count(line) == 1, logs[other][-3000:]
        assert f"`monitor streams rebind {stream} --source kafka:{topic} --group {other}`" \
            in logs[other]
        assert line not in logs[group]
    # Each group stored its own positions: the first to claim the topic under kafka:TOPIC.
    assert sorted(stored_offsets(pg_url)) == sorted([f"kafka:{topic}", f"kafka:{topic}#g-a"]) \
        or sorted(stored_offsets(pg_url)) == sorted([f"kafka:{topic}", f"kafka:{topic}#g-b"])


def _worker(url: str, example: Example, events: Path, batch_size: int = 50
            ) -> tuple[Worker, FileSource, DatabaseSink]:
    sink = DatabaseSink(url)
    source = FileSource(events)
    pipeline = Pipeline(build_monitors(read_configs(map(str, example.configs))), source.name)
    return Worker(source, pipeline, sink, "file", batch_size=batch_size), source, sink


def test_a_zombie_is_refused_and_stores_nothing(
    pg_url: str, example: Example, caplog: pytest.LogCaptureFixture
) -> None:
    zombie, z_source, z_sink = _worker(pg_url, example, example.events)
    heir, h_source, h_sink = _worker(pg_url, example, example.events)
    try:
        zombie.run(max_batches=2)
        assert stored_offsets(pg_url) == {z_source.name: {0: z_source.position}}
        h_source.poll(1, 0)  # the heir is assigned the partition (it restores, bumps the epoch)
        before = snapshot(pg_url)
        with caplog.at_level(logging.WARNING, logger="monitor.engine"):
            assert zombie._step()  # the zombie goes on with its third batch: refused
        assert "batch dropped" in caplog.text and "fencing epoch 1 was superseded" in caplog.text
        assert snapshot(pg_url) == before  # nothing of the zombie's batch is stored
        # The legitimate owner goes on from the stored state.
        h_source.seek({(h_source.topic, 0): before.offsets[(z_source.name, 0)]})
        heir.run(max_batches=1)
        assert stored_offsets(pg_url)[z_source.name][0] > before.offsets[(z_source.name, 0)]
    finally:
        for source, sink in ((z_source, z_sink), (h_source, h_sink)):
            source.close()
            sink.close()


def _run_file(url: str, example: Example, events: Path) -> None:
    """A worker over ``events``, stopped when read (before the end-of-file flush)."""
    worker, source, sink = _worker(url, example, events)
    lines = len(events.read_bytes().splitlines())
    stop = StopFlag()
    worker.on_batch = lambda _: stop.set() if source.position >= lines else None
    try:
        worker.run(stop)
    finally:
        source.close()
        sink.close()


def test_rebind_moves_a_stream_and_the_new_writer_proceeds(
    pg_url: str, example: Example, reference: Snapshot, tmp_path: Path
) -> None:
    lines = example.events.read_bytes().splitlines(keepends=True)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_bytes(b"".join(lines[: len(lines) // 2]))
    second.write_bytes(b"".join(lines[len(lines) // 2:]))
    _run_file(pg_url, example, first)
    assert set(bindings(pg_url).values()) == {(f"file:{first.resolve()}", "")}
    for spec in STREAMS:
        done = subprocess.run(
            [sys.executable, "-m", "monitor.cli", "--db", pg_url, "streams", "rebind",
             spec.name, "--file", str(second)],
            cwd=ROOT, capture_output=True, text=True, check=False, timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert f"is bound to file:{second.resolve()} (was: file:{first.resolve()})" in done.stdout
    _run_file(pg_url, example, second)
    got = snapshot(pg_url)
    assert not [d for d in got.dead_letters if " is bound to " in d[1]]
    assert_same_results(got, reference)  # the first file's writer, then the second's
    # A third file's writer is refused now: it stores nothing of the streams' records.
    third = tmp_path / "third.jsonl"
    third.write_bytes(b"".join(lines[: len(lines) // 2]))
    _run_file(pg_url, example, third)
    after = snapshot(pg_url)
    assert refused_letters(after) == 0
    fields = ("alarms", "checkpoints", "trace_points", "ood_windows", "ood_flags")
    assert [getattr(after, f) for f in fields] == [getattr(got, f) for f in fields]
