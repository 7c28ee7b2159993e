"""Topic → ``monitor run`` (its own process) → PostgreSQL equals the file run of the same events.

The events of three streams (delayed labels, scripted shifts, poison records of every kind) are
produced keyed by stream name, once with kafka-python's producer and once with confluent-kafka's
(librdkafka, with its defaults: like most producers in the wild), and each topic is read by
one worker per consumer client (kafka-python and librdkafka, ``?client=confluent``). A Kafka run
never ends by itself: the test waits until the offsets stored in PostgreSQL reach the end of
every partition, then sends SIGTERM and expects a clean stop (exit code 0, offsets committed to
the group). The two clients' databases hold the same results, offsets and dead letters.
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
from tests.support.kafka import CLIENTS, MOCK_URL_OPTIONS_BY_CLIENT
from tests.support.processes import (
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
    # One worker per producer and client, side by side (own group and database): they spend
    # most of their time starting up and joining their group, which overlaps.
    ends = {producer: produce(producer, kafka_broker_module, f"e2e-{producer}", example.values,
                              example.keys) for producer in PRODUCERS}
    with ExitStack() as stack:
        runs = [Run(producer, client, ends[producer], kafka_broker_module, stack.enter_context(
                    postgres_database(postgres_admin)), example, tmp_path)
                for producer in PRODUCERS for client in CLIENTS]
        try:
            for run in runs:
                wait_until(run.done, f"{run.producer}: stored offsets at the end", [run.worker])
            for run in runs:
                assert run.worker.terminate() == 0, run.worker.tail()
        finally:
            for run in runs:
                run.worker.ensure_dead()
                run.stored.close()
        results = {}
        for run in runs:
            results[run.producer, run.client] = run.check(
                reference, events=len(example.values) - len(reference.dead_letters))
    for producer in PRODUCERS:  # the clients agree on everything stored, byte for byte
        assert results[producer, "confluent"] == results[producer, "kafka-python"], producer


class Run:
    """``monitor run`` with one consumer client on the topic one producer family filled."""

    def __init__(self, producer: str, client: str, end: dict[int, int], bootstrap: str, db: str,
                 example: Example, folder: Path) -> None:
        self.producer, self.client, self.bootstrap, self.db = producer, client, bootstrap, db
        self.topic, self.group = f"e2e-{producer}", f"g-e2e-{producer}-{client}"
        self.end = end
        source = f"kafka://{bootstrap}/{self.topic}?{MOCK_URL_OPTIONS_BY_CLIENT[client]}"
        self.worker = WorkerProcess.cli(folder, f"{producer}-{client}", db, source, self.group,
                                        example.config_args, batch_size=100)
        self.stored = OffsetWatch(db, f"kafka:{self.topic}")

    def done(self) -> bool:
        return self.stored() == self.end

    def check(self, reference: Snapshot, events: int) -> Snapshot:
        assert group_offsets(self.bootstrap, self.group, self.topic, range(4)) == self.end
        got = snapshot(self.db)
        assert_same_results(got, reference)
        assert got.offsets == {(f"kafka:{self.topic}", p): o for p, o in self.end.items()}
        printed = [json.loads(line) for line in self.worker.out.read_text().splitlines()]
        assert sorted(f"{a['id']}:{a['revision']}" for a in printed) == got.alarm_versions
        assert_clean_stop(self.worker.logs(), events)
        return got


def assert_clean_stop(logs: str, events: int) -> None:
    """The worker noticed the stop, left the group and summarised the run."""
    assert "stop requested" in logs
    assert "left group" in logs
    assert f"{events} events in" in logs
    assert "Traceback" not in logs
