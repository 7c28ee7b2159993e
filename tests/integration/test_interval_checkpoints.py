"""Interval checkpoints (``checkpoint_every > 1``) store exactly what checkpointing every batch
stores, and deliver each alarm once per process even when a resynchronisation replays batches.

Crashes, rebalances, zombies and unstorable records with interval checkpoints are covered by the
parametrized tests of test_crash_recovery.py, test_consumer_group.py and test_worker_failures.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from sqlalchemy import Engine

from connectors import FileSource, MemorySource, Record
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import BatchOutput, Pipeline
from monitor.engine.worker import RunSummary, StopFlag, Worker
from monitor.streams.records import Alarm
from monitor.streams.setup import build_monitors, read_configs
from tests.support.databases import postgres_database, refuse_alarm
from tests.support.streams import (
    Example,
    Snapshot,
    assert_same_results,
    reference_run,
    snapshot,
)

pytestmark = [pytest.mark.postgres]


def run_to_end(
    example: Example, url: str, checkpoint_every: int, on_alarm: list[str] | None = None,
    on_batch: list[str] | None = None,
) -> RunSummary:
    """One worker over the whole events file, end-of-file flush included."""
    sink = DatabaseSink(url)
    source = FileSource(example.events)
    pipeline = Pipeline(build_monitors(read_configs(map(str, example.configs))), source.name)

    def alarm(a: Alarm) -> None:
        if on_alarm is not None:
            on_alarm.append(f"{a.id}:{a.revision}")

    def batch(out: BatchOutput) -> None:
        if on_batch is not None:
            on_batch.extend(f"{a.id}:{a.revision}" for a in out.alarms)

    worker = Worker(source, pipeline, sink, "file", batch_size=50, on_alarm=alarm,
                    on_batch=batch, checkpoint_every=checkpoint_every)
    try:
        summary = worker.run()
        assert source.committed == {(source.topic, 0): len(example.values)}
        return summary
    finally:
        source.close()
        sink.close()


def test_checkpoint_every_4_stores_what_every_batch_stores(
    pg_url: str, example: Example, reference: Snapshot
) -> None:
    got = reference_run(example, pg_url, batch_size=50, checkpoint_every=4)
    assert_same_results(got, reference)
    assert got.offsets == reference.offsets


def test_checkpoint_every_4_to_the_end_of_the_file_equals_every_batch(
    postgres_admin: Engine, example: Example
) -> None:
    """Including the end-of-file flush, the summary and what ``on_alarm`` receives."""
    runs = []
    for every in (1, 4):
        with postgres_database(postgres_admin) as url:
            delivered: list[str] = []
            summary = run_to_end(example, url, every, on_alarm=delivered)
            runs.append((snapshot(url), summary, delivered))
    (want, want_summary, want_delivered), (got, got_summary, got_delivered) = runs
    assert_same_results(got, want)
    assert got.offsets == want.offsets
    assert got_summary.to_json() == want_summary.to_json()
    assert got_summary.batches == want_summary.batches
    assert got_delivered == want_delivered
    assert sorted(want_delivered) == want.alarm_versions  # every version, once


def _batch_of(example: Example, alarm: dict[str, Any], batch_size: int = 50) -> int:
    """The batch whose record raised ``alarm``: a covariate alarm's prediction, a conditional
    alarm's label (the last record with its stream and event id)."""
    needle = f'"id":"{alarm["event_id"]}"'.encode()
    stream = f'"stream":"{alarm["stream"]}"'.encode()
    hits = [i for i, v in enumerate(example.values) if needle in v and stream in v]
    return (hits[0] if alarm["detector"] == "covariate" else hits[-1]) // batch_size


def _alarm_after_another(example: Example, reference: Snapshot, every: int) -> dict[str, Any]:
    batches = [(_batch_of(example, a), a) for a in reference.alarms]
    for b, alarm in sorted(batches, key=lambda x: x[0]):
        if any(every * (b // every) <= other < b for other, _ in batches):
            return alarm
    raise AssertionError("no alarm follows another alarm within a checkpoint interval")


def test_alarms_replayed_by_a_resync_are_delivered_once(
    postgres_admin: Engine, example: Example, reference: Snapshot
) -> None:
    """An unstorable record rewinds the worker to its last checkpoint, so the batches since
    then are processed again with their alarms: ``on_alarm`` gets each id once and the summary
    counts each once, as when every batch is a checkpoint."""
    # the first alarm raised after another alarm that follows the last checkpoint before it
    # (10 batches per checkpoint), so that the rewind replays that other alarm
    refused = _alarm_after_another(example, reference, every=10)
    runs = []
    for every in (1, 10):
        with postgres_database(postgres_admin) as url:
            refuse_alarm(url, refused)
            delivered: list[str] = []
            produced: list[str] = []
            summary = run_to_end(example, url, every, on_alarm=delivered, on_batch=produced)
            runs.append((snapshot(url), summary, delivered, produced))
    (want, want_summary, want_delivered, _), (got, got_summary, delivered, produced) = runs
    assert [i for i, n in Counter(produced).items() if n > 1], "no alarm was replayed"
    assert [i for i, n in Counter(delivered).items() if n > 1] == []
    assert sorted(delivered) == got.alarm_versions
    assert delivered == want_delivered
    assert got == want  # the refused record is dead-lettered as when every batch is a checkpoint
    assert got_summary.to_json() == want_summary.to_json()


def test_a_resync_rewinds_every_partition_read_since_the_checkpoint(
    postgres_admin: Engine, example: Example, reference: Snapshot
) -> None:
    """The refused batch holds records of partition 1 only, while partition 0 was read in the
    batches since the last checkpoint: both must go back, or partition 0's events would be
    skipped by detectors restored to the checkpoint (here: no checkpoint yet, fresh streams)."""
    refused = next(a for a in reference.alarms if a["stream"] == "taxis")
    culprit = next(i for i, v in enumerate(example.values)
                   if f'"id":"{refused["event_id"]}"'.encode() in v)
    split = culprit - culprit % 50 - 20  # the refused batch starts 20 records into partition 1
    records = [Record("resync", 0 if i < split else 1, i if i < split else i - split, None, v,
                      None) for i, v in enumerate(example.values)]
    runs = []
    for every in (1, 20):
        with postgres_database(postgres_admin) as url:
            refuse_alarm(url, refused)
            sink = DatabaseSink(url)
            source = MemorySource(records)
            pipeline = Pipeline(build_monitors(read_configs(map(str, example.configs))),
                                source.name)
            worker = Worker(source, pipeline, sink, "memory", batch_size=50,
                            checkpoint_every=every)
            try:
                summary = worker.run()
            finally:
                source.close()
                sink.close()
            runs.append((snapshot(url), summary))
    (want, want_summary), (got, got_summary) = runs
    assert culprit // 50 < 20, "the refused batch must come before the first checkpoint"
    assert got.offsets == {("memory:resync", 0): split,
                           ("memory:resync", 1): len(records) - split}
    assert got == want
    assert got_summary.to_json() == want_summary.to_json()


class EndlessSource(MemorySource):
    """A topic that never ends: polls past the last record return nothing."""

    def __init__(self, values: Sequence[bytes], on_empty: Callable[[int], None]) -> None:
        super().__init__(list(values), topic="endless")
        self.on_empty = on_empty
        self.empty_polls = 0

    @property
    def exhausted(self) -> bool:
        return False

    def poll(self, max_records: int, timeout_s: float) -> list[Record]:
        records = super().poll(max_records, timeout_s)
        if not records:
            self.empty_polls += 1
            self.on_empty(self.empty_polls)
        return records


def test_a_worker_that_caught_up_holds_nothing_unstored(pg_url: str, example: Example) -> None:
    """An empty poll checkpoints: a worker idling at the end of a topic has stored its progress
    (otherwise the tail of fewer than N batches would wait for more traffic)."""
    sink = DatabaseSink(pg_url)
    stop = StopFlag()
    seen: list[dict[tuple[str, int], int]] = []

    def on_empty(polls: int) -> None:
        if polls == 2:  # after the first empty poll, before the run's own final checkpoint
            seen.append(sink.load_offsets({("endless", 0)}, lambda t: f"memory:{t}"))
            stop.set()

    source = EndlessSource(example.values, on_empty)
    pipeline = Pipeline(build_monitors(read_configs(map(str, example.configs))), source.name)
    worker = Worker(source, pipeline, sink, "memory", batch_size=50, checkpoint_every=1000)
    try:
        worker.run(stop)
    finally:
        source.close()
        sink.close()
    assert seen == [{("endless", 0): len(example.values)}]
    assert source.committed == {("endless", 0): len(example.values)}
