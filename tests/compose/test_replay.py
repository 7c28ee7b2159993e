"""The compose stack's demo producer (``python -m monitor.ops.kafka_producer``) on a real Kafka
wire protocol.

The broker is librdkafka's mock cluster on loopback (connectors/mock_kafka.py); the producer under
test is kafka-python, as in the compose stack, and the records are read back with kafka-python.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer

from monitor.ops import kafka_producer as replay
from tests.support.kafka import kafka_broker

__all__ = ["kafka_broker"]  # the fixture, re-exported for pytest


def _lines() -> list[str]:
    events = []
    for i in range(12):
        stream = "bikes" if i % 3 else "taxis"
        events.append(
            {
                "kind": "prediction",
                "stream": stream,
                "id": f"e-{i}",
                "ts": "2026-01-01T00:00:00Z",
                "features": [i, 1.0],
                "prediction": 0.5,
            }
        )
    return [json.dumps(e) for e in events] + ["{not json", ""]


def test_keyed_records_restamp_and_key_by_stream() -> None:
    ticks = iter(range(100, 200))
    records = list(replay.keyed_records(_lines(), clock=lambda: float(next(ticks))))
    assert len(records) == 13  # the blank line is skipped, the bad one kept for the dead letters
    keys = [k for k, _ in records]
    assert keys[:3] == [b"taxis", b"bikes", b"bikes"] and keys[-1] is None
    stamps = [json.loads(v)["ts"] for _, v in records[:12]]
    assert stamps[0] == "1970-01-01T00:01:40Z" and stamps[11] == "1970-01-01T00:01:51Z"
    assert records[-1][1] == b"{not json"


def test_keep_ts() -> None:
    (_key, value), *_ = replay.keyed_records(_lines(), restamp=False)
    assert json.loads(value)["ts"] == "2026-01-01T00:00:00Z"


def test_pacing_waits_for_the_rate() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    for sent in range(5):
        replay._pace(0.0, sent, rate=10.0, clock=lambda: now[0], sleep=sleep)
    assert slept == pytest.approx([0.1, 0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="rate must be >= 0"):
        replay.produce("x", "127.0.0.1:1", "t", rate=-1)


def test_produce_to_kafka(tmp_path: Path, kafka_broker: str) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(_lines()) + "\n")
    sent = replay.produce(events, kafka_broker, "predictions", rate=0, connect_timeout=10)
    assert sent == 13
    received = _consume(kafka_broker, "predictions", 13)
    assert len(received) == 13
    by_key: dict[bytes | None, list[str]] = {}
    partitions: dict[bytes | None, set[int]] = {}
    for m in sorted(received, key=lambda m: (m.partition, m.offset)):
        by_key.setdefault(m.key, []).append(m.value.decode())
        partitions.setdefault(m.key, set()).add(m.partition)
    assert all(
        len(p) == 1 for k, p in partitions.items() if k is not None
    )  # one stream, one partition
    bikes = [json.loads(v)["id"] for v in by_key[b"bikes"]]
    assert bikes == [f"e-{i}" for i in range(12) if i % 3]  # in order within the stream
    assert by_key[None] == ["{not json"]


def _consume(bootstrap: str, topic: str, n: int, timeout: float = 20.0) -> list[Any]:
    """Read ``n`` records (or what arrives before the deadline) from the start of ``topic``."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    deadline = time.monotonic() + timeout
    received: list[Any] = []
    try:
        while len(received) < n and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                received.extend(batch)
    finally:
        consumer.close()
    return received


def test_main_produce(
    tmp_path: Path, kafka_broker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(_lines()[:3]) + "\n")
    code = replay.main(
        [
            "produce",
            "--events",
            str(events),
            "--bootstrap",
            kafka_broker,
            "--topic",
            "t2",
            "--rate",
            "0",
            "--keep-ts",
        ]
    )
    assert code == 0 and "sent 3 records to t2" in capsys.readouterr().out
    values = [json.loads(m.value) for m in _consume(kafka_broker, "t2", 3)]
    assert [v["ts"] for v in values] == ["2026-01-01T00:00:00Z"] * 3
