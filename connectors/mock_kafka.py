"""A Kafka wire-protocol broker on loopback for tests and benchmarks, and producers of both
client families.

There is no Kafka broker or Docker here: librdkafka (through confluent-kafka, a test-only
dependency) embeds a mock cluster that speaks the real Kafka protocol on 127.0.0.1. A
confluent-kafka client created with ``test.mock.num.brokers`` starts it; the cluster lives as
long as that client, so :func:`mock_kafka_cluster` keeps it referenced until its block ends
(the tests' fixtures: ``tests/support/kafka.py``).

Mock-cluster facts that tests must respect (librdkafka ``rdkafka_mock.c``):

- Topics are auto-created with 4 partitions on first use; CreateTopics is not supported.
- Each partition keeps at most 5 MiB of record batches (and 100 000 batches): older batches
  are deleted as new ones arrive, like retention on a real broker. Producing more than that to
  one partition before it is consumed loses the oldest records (a consumer starting at
  ``earliest`` then begins at the new log start and seems to stall short of the total).
  The produce helpers check this and raise :class:`MockRetentionExceeded`.
- A consumer group's first join waits 3 s (``group.initial.rebalance.delay.ms``); a rebalance of a
  non-empty group waits ``session_timeout_ms - 1000`` for members to rejoin.
- The mock mis-reads kafka-python's LeaveGroup v3 request (it parses every version as v0-2 and
  answers UNKNOWN_MEMBER_ID), so a closing kafka-python consumer does not leave the group and the
  others wait for its session to time out. ``api_version=(2, 3)`` makes kafka-python send
  LeaveGroup v2, which the mock handles.
- The mock completes a group's SyncGroup as soon as the leader's request arrives and then
  answers INVALID_REQUEST to a follower whose SyncGroup comes later (a real broker answers it
  with its assignment). Python clients lose that race often; the follower's poll then fails and
  the group rebalances again, ~2 s per round, unboundedly often. A leader that waits 0.3 s
  before assigning (:class:`PatientRangeAssignor`) lets every follower's SyncGroup arrive first.

:data:`MOCK_CONSUMER_OPTIONS` sets all three work-arounds; none is needed on a real broker.

Usage: import the fixture into your test folder's ``conftest.py`` (importing it into a test
module works too, but ruff then flags the test's parameter as a redefinition, F811)::

    # tests/<area>/conftest.py
    from tests.support.kafka import kafka_broker  # noqa: F401

    # tests/<area>/test_x.py
    from connectors.mock_kafka import produce_confluent

    def test_x(kafka_broker: str) -> None:
        produce_confluent(kafka_broker, "events", [b'{"a": 1}'], keys=[b"bikes"])
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import confluent_kafka
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.coordinator.assignors.range import RangePartitionAssignor

from monitor.errors import MonitorError

__all__ = [
    "MOCK_CONSUMER_OPTIONS",
    "MOCK_RDKAFKA_CONFIG",
    "MockRetentionExceeded",
    "PatientRangeAssignor",
    "low_watermarks",
    "mock_kafka_cluster",
    "produce_confluent",
    "produce_kafka_python",
]


class PatientRangeAssignor(RangePartitionAssignor):
    """kafka-python's range assignor, 0.3 s late, so followers sync before the leader."""

    @classmethod
    def assign(cls, cluster: Any, group_subscriptions: Any) -> Any:
        time.sleep(0.3)
        return super().assign(cluster, group_subscriptions)


#: kafka-python consumer options for the mock cluster (see the module docstring): rebalances take
#: ~2 s instead of ~9 s, a closing consumer leaves the group at once, and followers do not lose
#: the SyncGroup race. Real brokers need none of them.
MOCK_CONSUMER_OPTIONS: Mapping[str, Any] = {
    "session_timeout_ms": 3000,
    "heartbeat_interval_ms": 500,
    "api_version": (2, 3),
    "partition_assignment_strategy": (PatientRangeAssignor,),
}

#: librdkafka properties for the mock cluster: rebalances as quick as with
#: :data:`MOCK_CONSUMER_OPTIONS` (librdkafka leaves the group properly and its leader's
#: assignment is not in the SyncGroup race, which needs no work-around).
MOCK_RDKAFKA_CONFIG: Mapping[str, Any] = {
    "session.timeout.ms": 3000,
    "heartbeat.interval.ms": 500,
}

_log = logging.getLogger("tests.kafka_mock")

Value = bytes | str
Key = bytes | str | None


class MockRetentionExceeded(MonitorError, RuntimeError):
    """The mock broker deleted records before anyone read them (5 MiB per partition)."""


@contextmanager
def mock_kafka_cluster(num_brokers: int = 1) -> Iterator[str]:
    """Start librdkafka's mock cluster; yield its bootstrap address ``host:port[,...]``."""
    handle = confluent_kafka.Producer(
        {"test.mock.num.brokers": num_brokers, "logger": _log, "log_level": 4}
    )
    try:
        metadata = handle.list_topics(timeout=10)
        yield ",".join(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    finally:
        _close(handle)  # the cluster stops with the client that started it


def produce_kafka_python(
    bootstrap: str,
    topic: str,
    values: Iterable[Value],
    keys: Sequence[Key] | None = None,
    config: Mapping[str, Any] | None = None,
    check_retention: bool = True,
) -> list[tuple[int, int]]:
    """Produce with kafka-python; return each record's ``(partition, offset)`` in input order."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, **(config or {}))
    try:
        futures = [
            producer.send(topic, value=_bytes(v), key=_key(keys, i))
            for i, v in enumerate(values)
        ]
        producer.flush(timeout=60)
        placed = [(m.partition, m.offset) for m in (f.get(timeout=10) for f in futures)]
    finally:
        producer.close(timeout=10)
    if check_retention:
        _check_retention(bootstrap, topic)
    return placed


def produce_confluent(
    bootstrap: str,
    topic: str,
    values: Iterable[Value],
    keys: Sequence[Key] | None = None,
    config: Mapping[str, Any] | None = None,
    check_retention: bool = True,
) -> list[tuple[int, int]]:
    """Produce with confluent-kafka (librdkafka defaults unless ``config`` overrides them);
    return each record's ``(partition, offset)`` in input order."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "logger": _log, **(config or {})}
    )
    placed: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def delivered(err: Any, msg: Any, index: int) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            placed[index] = (msg.partition(), msg.offset())

    try:
        for i, value in enumerate(values):
            _produce_one(producer, topic, _bytes(value), _key(keys, i),
                         lambda err, msg, i=i: delivered(err, msg, i))
        left = producer.flush(60)
    finally:
        _close(producer)
    if left or errors:
        raise RuntimeError(f"confluent producer: {left} undelivered, errors: {errors[:3]}")
    if check_retention:
        _check_retention(bootstrap, topic)
    return [placed[i] for i in range(len(placed))]


def low_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    """First offset still stored, per partition of ``topic``."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [KafkaTopicPartition(topic, p) for p in sorted(partitions)]
        return {tp.partition: offset for tp, offset in consumer.beginning_offsets(tps).items()}
    finally:
        consumer.close()


def _produce_one(
    producer: Any, topic: str, value: bytes, key: bytes | None, on_delivery: Any
) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            producer.poll(0)
            return
        except BufferError:  # local queue full: let deliveries drain
            producer.poll(0.05)


def _close(client: Any) -> None:
    # Producer.close() is recent in confluent-kafka; older versions release the client on
    # garbage collection (and it logs reconnect failures until then).
    close = getattr(client, "close", None)
    if close is not None:
        close()


def _check_retention(bootstrap: str, topic: str) -> None:
    lost = {p: o for p, o in low_watermarks(bootstrap, topic).items() if o > 0}
    if lost:
        raise MockRetentionExceeded(
            f"the mock broker already deleted the first records of {topic} (log start offsets "
            f"{lost}): it keeps 5 MiB per partition. Produce less per partition, spread keys, "
            "or consume while producing"
        )


def _bytes(value: Value) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _key(keys: Sequence[Key] | None, index: int) -> bytes | None:
    if keys is None:
        return None
    key = keys[index]
    return key.encode() if isinstance(key, str) else key
