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
from pathlib import Path

import pytest

from tests.integration.processes import (
    MOCK_URL_OPTIONS,
    OffsetWatch,
    WorkerProcess,
    group_offsets,
    wait_until,
)
from tests.integration.streams import (
    Example,
    Snapshot,
    assert_same_results,
    end_offsets,
    snapshot,
    stream_partitions,
)
from tests.kafka_harness import produce_confluent, produce_kafka_python

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


@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_topic_to_postgres_equals_the_file_run(
    producer: str, kafka_broker_module: str, pg_url: str, example: Example,
    reference: Snapshot, tmp_path: Path,
) -> None:
    topic, group = f"e2e-{producer}", f"g-e2e-{producer}"
    end = produce(producer, kafka_broker_module, topic, example.values, example.keys)
    source = f"kafka://{kafka_broker_module}/{topic}?{MOCK_URL_OPTIONS}"
    worker = WorkerProcess.cli(tmp_path, "worker", pg_url, source, group, example.config_args,
                               batch_size=100)
    stored = OffsetWatch(pg_url, f"kafka:{topic}")
    try:
        wait_until(lambda: stored() == end, "stored offsets at the end of the topic", [worker])
        assert worker.terminate() == 0, worker.tail()
    finally:
        worker.ensure_dead()
        stored.close()
    assert group_offsets(kafka_broker_module, group, topic, range(4)) == end
    got = snapshot(pg_url)
    assert_same_results(got, reference)
    assert got.offsets == {(f"kafka:{topic}", p): o for p, o in end.items()}
    printed = [json.loads(line) for line in worker.out.read_text().splitlines()]
    assert sorted(a["id"] for a in printed) == sorted(a["id"] for a in got.alarms)
    assert_clean_stop(worker.logs(), events=len(example.values) - len(reference.dead_letters))


def assert_clean_stop(logs: str, events: int) -> None:
    """The worker noticed the stop, left the group and summarised the run."""
    assert "stop requested" in logs
    assert "left group" in logs
    assert f"{events} events in" in logs
    assert "Traceback" not in logs
