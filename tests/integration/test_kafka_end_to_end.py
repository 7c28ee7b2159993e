"""Topic → ``monitor run`` (its own process) → PostgreSQL equals the file run of the same events.

The events of three streams (delayed labels, scripted shifts, poison records of every kind) are
produced keyed by stream name, once with kafka-python's producer and once with confluent-kafka's
(librdkafka, with its defaults: like most producers in the wild). A Kafka run never ends by
itself: the test waits until the offsets stored in PostgreSQL reach the end of every partition,
then sends SIGTERM and expects a clean stop (exit code 0, offsets committed to the group).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import Engine

from connectors.mock_kafka import produce_confluent, produce_kafka_python
from tests.support.databases import postgres_database
from tests.support.processes import (
    MOCK_URL_OPTIONS,
    OffsetWatch,
    WorkerProcess,
    group_offsets,
    wait_until,
)
from tests.support.streams import (
    Example,
    Snapshot,
    assert_same_results,
    end_offsets,
    snapshot,
    stream_partitions,
)

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

Producer = Callable[..., list[tuple[int, int]]]
PRODUCERS: dict[str, Producer] = {
    "kafka-python": produce_kafka_python,
    "confluent-kafka": produce_confluent,
}


def produce(producer: str, bootstrap: str, topic: str, values: Sequence[bytes],
            keys: Sequence[str]) -> dict[int, int]:
    """Produce keyed records; check every stream landed on one partition; return end offsets."""
    placed = PRODUCERS[producer](bootstrap, topic, values, keys)
    spread = stream_partitions(placed, keys)
    assert all(len(partitions) == 1 for partitions in spread.values()), spread
    return end_offsets(placed)


def test_topic_to_postgres_equals_the_file_run(
    kafka_broker_module: str, postgres_admin: Engine, example: Example, reference: Snapshot,
    tmp_path: Path,
) -> None:
    # One worker per producer, side by side (own topic, group and database): they spend most of
    # their time starting up and joining their group, which overlaps.
    with ExitStack() as stack:
        runs = [Run(producer, kafka_broker_module, stack.enter_context(
                    postgres_database(postgres_admin)), example, tmp_path)
                for producer in PRODUCERS]
        try:
            for run in runs:
                wait_until(run.done, f"{run.producer}: stored offsets at the end", [run.worker])
            for run in runs:
                assert run.worker.terminate() == 0, run.worker.tail()
        finally:
            for run in runs:
                run.worker.ensure_dead()
                run.stored.close()
        for run in runs:
            run.check(reference, events=len(example.values) - len(reference.dead_letters))


class Run:
    """Produce the example to a topic with one client family; run ``monitor run`` on it."""

    def __init__(self, producer: str, bootstrap: str, db: str, example: Example,
                 folder: Path) -> None:
        self.producer, self.bootstrap, self.db = producer, bootstrap, db
        self.topic, self.group = f"e2e-{producer}", f"g-e2e-{producer}"
        self.end = produce(producer, bootstrap, self.topic, example.values, example.keys)
        source = f"kafka://{bootstrap}/{self.topic}?{MOCK_URL_OPTIONS}"
        self.worker = WorkerProcess.cli(folder, producer, db, source, self.group,
                                        example.config_args, batch_size=100)
        self.stored = OffsetWatch(db, f"kafka:{self.topic}")

    def done(self) -> bool:
        return self.stored() == self.end

    def check(self, reference: Snapshot, events: int) -> None:
        assert group_offsets(self.bootstrap, self.group, self.topic, range(4)) == self.end
        got = snapshot(self.db)
        assert_same_results(got, reference)
        assert got.offsets == {(f"kafka:{self.topic}", p): o for p, o in self.end.items()}
        printed = [json.loads(line) for line in self.worker.out.read_text().splitlines()]
        assert sorted(f"{a['id']}:{a['revision']}" for a in printed) == got.alarm_versions
        assert_clean_stop(self.worker.logs(), events)


def assert_clean_stop(logs: str, events: int) -> None:
    """The worker noticed the stop, left the group and summarised the run."""
    assert "stop requested" in logs
    assert "left group" in logs
    assert f"{events} events in" in logs
    assert "Traceback" not in logs
