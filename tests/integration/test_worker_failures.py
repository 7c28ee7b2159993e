"""The worker under failure: PostgreSQL outages, a zombie writer, a bounded summary.

Outages are real: the test database stops accepting connections (``ALLOW_CONNECTIONS false``)
and its sessions are terminated, exactly what a worker sees when the server goes away. A short
outage is retried with backoff and the worker carries on; a long one stops it past its deadline
without committing anything to Kafka, and a restarted worker resumes exactly. These workers run
in-process (threads), where the retry policy can be set and exceptions observed directly.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from connectors import KafkaSource, MemorySource
from connectors.mock_kafka import MOCK_CONSUMER_OPTIONS, produce_kafka_python
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import BatchOutput, Pipeline
from monitor.engine.worker import (
    DatabaseUnavailableError,
    RetryPolicy,
    RunSummary,
    StopFlag,
    Worker,
)
from monitor.streams.records import Alarm
from monitor.streams.setup import build_monitors, read_configs
from tests.support.databases import refuse_alarm
from tests.support.processes import OffsetWatch, group_offsets, wait_until
from tests.support.streams import (
    Example,
    Snapshot,
    assert_same_results,
    end_offsets,
    reference_run,
    snapshot,
)

pytestmark = [pytest.mark.postgres]


@contextmanager
def database_down(admin: Engine, url: str) -> Iterator[None]:
    """The database refuses connections and drops the open ones until the block ends."""
    name = make_url(url).database
    with admin.connect() as conn:
        conn.exec_driver_sql(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        conn.exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))
    try:
        yield
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')


class WorkerThread:
    """A Kafka worker (source, pipeline, database sink) running in a thread."""

    def __init__(self, example: Example, bootstrap: str, topic: str, url: str,
                 retry: RetryPolicy) -> None:
        self.source = KafkaSource(bootstrap, topic, f"g-{topic}", **MOCK_CONSUMER_OPTIONS)
        self.sink = DatabaseSink(url)
        pipeline = Pipeline(build_monitors(read_configs(map(str, example.configs))),
                            self.source.name)
        self.worker = Worker(self.source, pipeline, self.sink, "kafka", batch_size=50,
                             retry=retry)
        self.stop = StopFlag()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=topic)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run(self.stop)
        except BaseException as exc:
            self.error = exc
        finally:
            self.source.close()
            self.sink.close()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def thirds(values: Sequence[bytes]) -> list[slice]:
    n = len(values) // 3
    return [slice(0, n), slice(n, 2 * n), slice(2 * n, None)]


@pytest.mark.kafka
def test_database_outages_are_retried_then_bounded_and_nothing_is_committed_meanwhile(
    kafka_broker_module: str, pg_url: str, postgres_admin: Engine, example: Example,
    reference: Snapshot, caplog: pytest.LogCaptureFixture,
) -> None:
    topic = "outage"
    bootstrap = kafka_broker_module
    placed: list[tuple[int, int]] = []

    def produce(part: slice) -> dict[int, int]:
        placed.extend(produce_kafka_python(bootstrap, topic, example.values[part],
                                           example.keys[part]))
        return end_offsets(placed)

    def committed() -> dict[int, int]:
        return group_offsets(bootstrap, f"g-{topic}", topic, range(4))

    first, second, third = thirds(example.values)
    stored = OffsetWatch(pg_url, f"kafka:{topic}")
    retry = RetryPolicy(deadline_s=4.0, backoff_s=0.1, max_backoff_s=0.5)
    caplog.set_level(logging.WARNING, "monitor.engine")
    try:
        end = produce(first)
        worker = WorkerThread(example, bootstrap, topic, pg_url, retry)
        wait_until(lambda: stored() == end, "the first third stored")
        # A short outage: retried with backoff, logged, nothing committed meanwhile; then the
        # worker carries on by itself.
        with database_down(postgres_admin, pg_url):
            previous, end = end, produce(second)
            wait_until(lambda: caplog.text.count("persisting a batch failed") >= 3, "retries")
            assert committed() == previous
            assert worker.alive
        wait_until(lambda: stored() == end, "the second third stored")
        assert worker.alive and worker.error is None
        # A long outage: the worker gives up at its deadline, without committing.
        with database_down(postgres_admin, pg_url):
            previous, end = end, produce(third)
            worker.thread.join(30)
            assert not worker.alive
            assert isinstance(worker.error, DatabaseUnavailableError), worker.error
            assert "nothing was committed" in str(worker.error)
            assert committed() == previous
        assert stored() == previous
        # A restarted worker resumes exactly where the database left off.
        restarted = WorkerThread(example, bootstrap, topic, pg_url, retry)
        wait_until(lambda: stored() == end, "everything stored")
        restarted.finish()
        assert restarted.error is None
    finally:
        stored.close()
    assert_same_results(snapshot(pg_url), reference)
    assert committed() == end


@pytest.mark.parametrize("checkpoint_every", [1, 4])
def test_a_zombie_batch_is_dropped_and_the_worker_resyncs_from_the_database(
    checkpoint_every: int, pg_url: str, example: Example, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that lost its partition to a faster one must not overwrite newer results."""
    def worker(sink: DatabaseSink) -> tuple[Worker, MemorySource]:
        source = MemorySource(example.values, partitions=1, topic="zombie")
        pipeline = Pipeline(build_monitors(read_configs(map(str, example.configs))), source.name)
        return Worker(source, pipeline, sink, "memory", batch_size=100,
                      checkpoint_every=checkpoint_every), source

    sink = DatabaseSink(pg_url)
    try:
        zombie, _ = worker(sink)
        zombie.run(max_batches=2)  # then stalls (a long GC pause, a network partition) ...
        healthy, _ = worker(sink)
        healthy.run()  # ... while another worker processes everything
        after_healthy = snapshot(pg_url)
        with caplog.at_level(logging.WARNING, "monitor.engine"):
            zombie.run()  # wakes up: its next batch would move the offsets back
        assert "batch dropped" in caplog.text and "resynchronised" in caplog.text
    finally:
        sink.close()
    assert zombie.summary.batches >= 2
    assert_same_results(snapshot(pg_url), after_healthy)
    assert snapshot(pg_url).offsets == {("memory:zombie", 0): len(example.values)}


def test_a_long_running_summary_keeps_only_the_latest_records() -> None:
    summary = RunSummary(limit=3)
    for i in range(10):
        ts = datetime(2026, 1, 1, tzinfo=UTC)
        alarm = Alarm("s", "conditional", "concept_shift", f"e-{i}", i, ts, None, 1.0, 1.0, "cusum")
        summary.add(BatchOutput(alarms=[alarm], events=1))
    assert summary.alarm_count == 10 and summary.events == 10
    assert 3 <= len(summary.alarms) <= 6
    assert summary.alarms[-1].event_index == 9


@pytest.mark.parametrize("checkpoint_every", [1, 4])
def test_a_record_whose_results_the_database_refuses_is_dead_lettered_and_the_rest_goes_on(
    checkpoint_every: int, pg_url: str, example: Example, reference: Snapshot
) -> None:
    """A deterministic storage error must not stop the worker forever (a poison pill).

    With interval checkpoints the worker rewinds to the last checkpoint, further than the
    refused batch, and isolates records one at a time from there: the same record is found.
    """
    # taxis carries its labels inline: the prediction record raises each of its alarms.
    refused = next((a for a in reference.alarms if a["stream"] == "taxis"), None)
    assert refused is not None, "the example's taxis stream raises no alarm any more"
    refuse_alarm(pg_url, refused)
    got = reference_run(example, pg_url, batch_size=50, checkpoint_every=checkpoint_every)
    assert got.offsets == reference.offsets  # read to the end
    culprit = next(v for v in example.values if f'"id":"{refused["event_id"]}"'.encode() in v)
    unstorable = [d for d in got.dead_letters if d[1].startswith("results cannot be stored")]
    assert [(d[0], d[2]) for d in unstorable] == [(None, culprit)]
    assert "CheckViolation" in unstorable[0][1]
    assert sorted(set(got.dead_letters) - set(unstorable), key=repr) == reference.dead_letters
    assert refused["id"] not in {a["id"] for a in got.alarms}
    for stream in ("bikes", "loans"):  # the other streams are untouched
        assert [a for a in got.alarms if a["stream"] == stream] == [
            a for a in reference.alarms if a["stream"] == stream]
        assert got.checkpoints[stream] == reference.checkpoints[stream]
