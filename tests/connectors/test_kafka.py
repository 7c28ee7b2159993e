"""The Kafka sources on a real Kafka wire-protocol broker (librdkafka's mock cluster on loopback).

Every test of the source contract runs with each client (``kafka_client``: KafkaSource on
kafka-python, RdKafkaSource on librdkafka); the codec and producer tests are kafka-python's.

Both producer families feed the source: kafka-python, and confluent-kafka (librdkafka, like most
producers in the wild). Group joins on the mock take 3 s each, which sets these tests' pace.
The ``kafka_broker`` fixture comes from connectors/mock_kafka.py through this folder's conftest.py.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import kafka.codec
import pytest

from connectors import (
    KafkaSource,
    OffsetRegressionError,
    PartitionNotAssignedError,
    RdKafkaSource,
    Record,
    SourceUnavailableError,
    UnsupportedCompressionError,
    open_source,
)
from connectors.group import GroupSource
from connectors.mock_kafka import (
    MOCK_CONSUMER_OPTIONS,
    MockRetentionExceeded,
    low_watermarks,
    produce_confluent,
    produce_kafka_python,
)
from connectors.url import kafka_source_class
from tests.support.kafka import mock_source

pytestmark = pytest.mark.kafka

TopicPartition = tuple[str, int]


def events(n: int, streams: int = 4, start: int = 0) -> tuple[list[bytes], list[str]]:
    """``n`` wire-format prediction events and their keys (the stream names)."""
    values, keys = [], []
    for i in range(start, start + n):
        stream = f"stream-{i % streams}"
        event = {"kind": "prediction", "stream": stream, "id": f"e-{i:06d}",
                 "features": [0.1, 0.2, 0.3], "prediction": 1.5}
        values.append(json.dumps(event).encode())
        keys.append(stream)
    return values, keys


def poll_until(
    source: GroupSource, n: int, timeout_s: float = 120.0, batch: int = 5000
) -> list[Record]:
    """Poll until ``n`` records arrived (fails after ``timeout_s``)."""
    records: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < n:
        assert time.monotonic() < deadline, f"got {len(records)} of {n} records"
        records += source.poll(batch, 0.2)
    return records


def positions(records: Sequence[Record]) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for r in records:
        by_partition[r.partition].append(r.offset)
    return dict(by_partition)


def expected_positions(placed: Sequence[tuple[int, int]]) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in placed:
        by_partition[partition].append(offset)
    return {p: sorted(o) for p, o in by_partition.items()}


def test_produce_poll_commit_and_resume_in_the_same_group(kafka_broker: str,
                                                         kafka_client: str) -> None:
    values, keys = events(200)
    placed = produce_kafka_python(kafka_broker, "resume", values, keys)
    first = mock_source(kafka_client, kafka_broker, "resume", "g-resume")
    records = poll_until(first, 200)
    assert positions(records) == expected_positions(placed)
    assert sorted(r.value for r in records) == sorted(values)
    assert all(r.key is not None and r.key.startswith(b"stream-") for r in records)
    assert all(r.timestamp_ms is not None and r.timestamp_ms > 0 for r in records)
    # Commit the first half of each partition, as if the worker had persisted only that much.
    half = {p: offsets[len(offsets) // 2] for p, offsets in positions(records).items()}
    first.commit({("resume", p): offset for p, offset in half.items()})
    first.close()

    second = mock_source(kafka_client, kafka_broker, "resume", "g-resume")
    rest = poll_until(second, 200 - sum(half.values()))
    assert second.poll(1000, 0.5) == []
    second.close()
    assert positions(rest) == {
        p: [o for o in offsets if o >= half[p]] for p, offsets in expected_positions(placed).items()
    }


def test_seek_in_on_assign_and_backwards(kafka_broker: str, kafka_client: str) -> None:
    values, _ = events(100)
    placed = produce_kafka_python(kafka_broker, "seek", values, ["one-stream"] * 100)
    partition = placed[0][0]
    tp = ("seek", partition)
    source = mock_source(kafka_client, kafka_broker, "seek", "g-seek")

    def resume_at_stored_offsets(assigned: set[TopicPartition]) -> None:
        if tp in assigned:
            source.seek({tp: 60})

    source.on_assign(resume_at_stored_offsets)
    records = poll_until(source, 40)
    assert [r.offset for r in records] == list(range(60, 100))
    assert [r.value for r in records] == values[60:]
    source.seek({tp: 10})
    assert [r.offset for r in poll_until(source, 90)] == list(range(10, 100))
    with pytest.raises(PartitionNotAssignedError, match="not assigned"):
        source.seek({("other-topic", 0): 0})
    assert source.skipped_offsets == 0
    source.close()


def test_a_failing_callback_surfaces_from_poll_and_loses_no_record(kafka_broker: str,
                                                                  kafka_client: str) -> None:
    values, keys = events(50)
    produce_kafka_python(kafka_broker, "cb", values, keys)
    source = mock_source(kafka_client, kafka_broker, "cb", "g-cb")
    calls: list[set[TopicPartition]] = []

    def restore_fails_once(partitions: set[TopicPartition]) -> None:
        calls.append(partitions)
        if len(calls) == 1:
            raise RuntimeError("database down")

    source.on_assign(restore_fails_once)
    before: list[Record] = []
    with pytest.raises(RuntimeError, match="database down"):  # kafka-python would only log it
        deadline = time.monotonic() + 120  # liveness, not speed
        while time.monotonic() < deadline:
            before += source.poll(1000, 0.2)
    assert before == []
    records = poll_until(source, 50)
    source.close()
    assert sorted(r.value for r in records) == sorted(values)


def test_commits_only_increase(kafka_broker: str, kafka_client: str) -> None:
    values, _ = events(20)
    placed = produce_kafka_python(kafka_broker, "monotonic", values, ["s"] * 20)
    tp = ("monotonic", placed[0][0])
    with mock_source(kafka_client, kafka_broker, "monotonic", "g-mono") as source:
        poll_until(source, 20)
        source.commit({tp: 15})
        source.commit({tp: 15})
        with pytest.raises(OffsetRegressionError, match="only ever increase"):
            source.commit({tp: 14})
        with pytest.raises(PartitionNotAssignedError):
            source.commit({("monotonic", 99): 1})
        source.commit({tp: 20})
        assert source.committed == {tp: 20}


class Member:
    """A group member polling and committing in its own thread, as a worker does."""

    def __init__(self, name: str, client: str, bootstrap: str,
                 log: list[tuple[str, str, set[Any]]]) -> None:
        self.name = name
        self.source = mock_source(client, bootstrap, "split", "g-split")
        self.owned: set[TopicPartition] = set()
        self.records: list[Record] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._log = log
        self.source.on_revoke(self._revoked)
        self.source.on_assign(self._assigned)
        self._thread = threading.Thread(target=self._run, name=name)
        self._thread.start()

    def _revoked(self, partitions: set[TopicPartition]) -> None:
        with self._lock:
            self.owned -= partitions
            self._log.append((self.name, "revoke", partitions))

    def _assigned(self, partitions: set[TopicPartition]) -> None:
        with self._lock:
            self.owned |= partitions
            self._log.append((self.name, "assign", partitions))

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self.source.poll(1000, 0.1)
            if batch:
                self.source.commit({(r.topic, r.partition): r.offset + 1 for r in batch})
                with self._lock:
                    self.records += batch
        self.source.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def wait_for(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_two_members_split_the_partitions_and_one_takes_over(kafka_broker: str,
                                                             kafka_client: str) -> None:
    everything = {("split", p) for p in range(4)}
    log: list[tuple[str, str, set[Any]]] = []
    values, keys = events(400, streams=16)
    produce_kafka_python(kafka_broker, "split", values, keys)
    a = Member("a", kafka_client, kafka_broker, log)
    try:
        wait_for(lambda: len(a.records) == 400)
        b = Member("b", kafka_client, kafka_broker, log)
        try:
            wait_for(lambda: len(a.owned) == 2 and len(b.owned) == 2)
            assert a.owned | b.owned == everything
            values, keys = events(400, streams=16, start=400)
            produce_kafka_python(kafka_broker, "split", values, keys)
            wait_for(lambda: len(a.records) + len(b.records) == 800)
            assert {(r.topic, r.partition) for r in b.records} == b.owned
            b_owned = set(b.owned)
        finally:
            b.stop()
        wait_for(lambda: a.owned == everything)
        values, keys = events(400, streams=16, start=800)
        produce_kafka_python(kafka_broker, "split", values, keys)
        wait_for(lambda: len(a.records) + len(b.records) == 1200)
    finally:
        a.stop()
    assert sorted(r.value for r in a.records + b.records) == sorted(events(1200, streams=16)[0])
    a_events = [(kind, parts) for name, kind, parts in log if name == "a"]
    assert a_events[0] == ("assign", everything)
    assert ("revoke", everything) in a_events  # eager rebalance when b joined ...
    assert ("assign", everything - b_owned) in a_events
    assert a_events[-3:] == [("revoke", everything - b_owned), ("assign", everything),
                             ("revoke", everything)]  # ... b left; a closed last
    assert ("b", "revoke", b_owned) in log  # b's close fired its revoke callbacks


def test_confluent_producer_in_large_batches(kafka_broker: str, kafka_client: str) -> None:
    # 100 000 events (~11 MB) in batches of up to 10 000 records / 1 MB (librdkafka's batch
    # limits, linger 100 ms), keyed by 16 streams so that no partition outgrows the mock
    # broker's 5 MiB retention before it is read (see docs/kafka.md).
    values, keys = events(100_000, streams=16)
    config = {"linger.ms": 100, "batch.num.messages": 10_000, "batch.size": 1_000_000}
    placed = produce_confluent(kafka_broker, "bulk", values, keys, config=config)
    source = open_source(f"kafka://{kafka_broker}/bulk?client={kafka_client}", group="g-bulk")
    # Default consumer options: no mock-specific pins.
    assert isinstance(source, {"kafka-python": KafkaSource, "confluent": RdKafkaSource}[
        kafka_client])
    try:
        records = poll_until(source, 100_000, timeout_s=300)
        assert source.poll(1000, 0.2) == []
        assert source.skipped_offsets == 0
    finally:
        source.close()
    assert positions(records) == expected_positions(placed)
    assert sorted(r.value for r in records) == sorted(values)
    assert all(json.loads(r.value)["kind"] == "prediction" for r in records[:1000])


def test_retention_of_the_mock_explains_the_stall(
    kafka_broker: str, kafka_client: str, caplog: pytest.LogCaptureFixture
) -> None:
    # 60 000 events of one stream are ~7 MB in one partition: the mock keeps the last 5 MiB,
    # so the first records are gone before any consumer reads them. A consumer resuming at
    # offset 0 is moved to the log start: the source reports the skipped offsets loudly.
    values, _ = events(60_000)
    placed = produce_confluent(kafka_broker, "one", values, ["one-stream"] * 60_000,
                               check_retention=False)
    partition = placed[0][0]
    start = low_watermarks(kafka_broker, "one")[partition]
    assert 0 < start < 60_000
    with pytest.raises(MockRetentionExceeded, match="5 MiB per partition"):
        produce_confluent(kafka_broker, "one", [], [])
    source = mock_source(kafka_client, kafka_broker, "one", "g-one")
    source.on_assign(lambda tps: source.seek({("one", partition): 0}))
    with caplog.at_level(logging.WARNING, "connectors.kafka"):
        records = poll_until(source, 60_000 - start)
    source.close()
    assert records[0].offset == start
    assert source.skipped_offsets == start
    assert f"offsets 0..{start - 1} were not delivered" in caplog.text


def test_compressed_and_large_batches_and_an_actionable_error_for_a_missing_codec(
    kafka_broker: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    available = {"gzip": True, "lz4": kafka.codec.has_lz4(), "zstd": kafka.codec.has_zstd(),
                 "snappy": kafka.codec.has_snappy()}
    codecs = [codec for codec, ok in available.items() if ok]
    values, keys = events(2000)
    for codec in codecs:
        produce_confluent(kafka_broker, f"c-{codec}", values, keys,
                          config={"compression.codec": codec, "linger.ms": 50})
    # And one uncompressed batch of ~2.5 MB, over kafka-python's 1 MiB max_partition_fetch_bytes:
    # the broker returns a first batch whole whatever its size (KIP-74), kafka-python reads it,
    # provided the response frame is allowed (receive_message_max_bytes, default 1 000 000:
    # kafka-python would drop the connection once, logging "Invalid frame length").
    big, _ = events(20_000)
    placed = produce_confluent(
        kafka_broker, "c-big", big, ["one-stream"] * len(big),
        config={"linger.ms": 2000, "batch.num.messages": 100_000, "batch.size": 8_000_000,
                "message.max.bytes": 8_000_000})
    assert len({offset for _, offset in placed}) == len(big)
    topics = [f"c-{codec}" for codec in codecs] + ["c-big"]
    source = KafkaSource(kafka_broker, topics, "g-codecs", **MOCK_CONSUMER_OPTIONS)
    with caplog.at_level(logging.WARNING, "kafka"):
        records = poll_until(source, 2000 * len(codecs) + len(big))
    assert "Invalid frame length" not in caplog.text
    for topic in topics:
        expected = big if topic == "c-big" else values
        assert sorted(r.value for r in records if r.topic == topic) == sorted(expected)
    # The same consumer, without the lz4 library (simulated: kafka-python checks at decode time).
    produce_confluent(kafka_broker, "c-gzip", values[:10], keys[:10],
                      config={"compression.codec": "lz4"})
    monkeypatch.setattr(kafka.codec, "has_lz4", lambda: False)
    with pytest.raises(UnsupportedCompressionError, match="pip install lz4"):
        poll_until(source, 10)
    source.close()


def test_producers_agree_on_partitions_with_murmur2(kafka_broker: str) -> None:
    keys = [f"stream-{i}" for i in range(32)]
    values = [b"{}"] * len(keys)
    java_like = produce_kafka_python(kafka_broker, "p-kp", values, keys)
    librdkafka_default = produce_confluent(kafka_broker, "p-rd", values, keys)
    murmur2 = produce_confluent(kafka_broker, "p-mm", values, keys,
                                config={"partitioner": "murmur2_random"})
    partition = [p for p, _ in java_like]
    assert [p for p, _ in murmur2] == partition
    # librdkafka's default (CRC32) puts some streams elsewhere: mixed producers must agree.
    assert [p for p, _ in librdkafka_default] != partition


@pytest.mark.timeout(120)
def test_unreachable_broker_raises_after_the_deadline(
    kafka_client: str, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:  # a loopback port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, "connectors.kafka"), pytest.raises(
        SourceUnavailableError, match="no Kafka broker answered"
    ):
        probe = {"kafka-python": {"api_version_auto_timeout_ms": 400}, "confluent": {}}
        kafka_source_class(kafka_client)(f"127.0.0.1:{port}", "t", "g", start_timeout_s=2.5,
                                         retry_backoff_s=0.2, **probe[kafka_client])
    # It gave up no sooner than its deadline (no upper bound: a slow machine only delays it;
    # a source that never gave up would fail the test's 120 s timeout).
    assert time.monotonic() - start >= 2.5
    assert caplog.text.count("retrying") >= 2
