"""Kafka consume rates on librdkafka's mock broker (loopback, real Kafka wire protocol), which
runs in a child process (:mod:`mock_broker`) so that its threads are not the consumer's CPU.

Figures (records per second, steady state: from the first fetched batch to the N-th record,
so the group join is not counted):

- ``raw``: a bare kafka-python ``KafkaConsumer`` (assigned all partitions, no group) that
  ``json.loads`` every value: the ceiling the worker is compared with (issue #13: the worker at
  >= 0.5 x raw);
- ``source``: :class:`connectors.KafkaSource` in a consumer group (``Record`` objects), plus
  ``json.loads``: what the connector costs on top of the raw consumer.

The events are wire-format predictions keyed by 16 stream names, produced before consuming
(with confluent-kafka, i.e. librdkafka, by default), in the broker's process. The mock broker
keeps 5 MiB per partition: about 160 000 such events in all; beyond that the producer helper
raises (see docs/kafka.md).

Usage::

    .venv/bin/python bench/bench_kafka.py                  # 100 000 events, best of 3
    .venv/bin/python bench/bench_kafka.py --events 20000 --producer kafka-python --json

``raw_consume_rate(bootstrap, topic, n)`` is importable, to measure the raw ceiling beside the
worker's end-to-end rate on the same broker in the same run (``raw_consume_rates`` also gives
records per CPU second of the process, a figure less sensitive to other load on the machine);
so is ``peer_consume_rates``: the same loop feeding river's ADWIN and PageHinkley per stream
(:class:`RiverPeer`), the baseline of what a user would write without the worker.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.consumer.fetcher import ConsumerRecord

for _path in (str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from mock_broker import broker_process  # noqa: E402

from connectors import DEFAULT_CONSUMER_OPTIONS, KafkaSource  # noqa: E402
from connectors.mock_kafka import MOCK_CONSUMER_OPTIONS  # noqa: E402

STREAMS = 16


class SteadyRate:
    """Counts records from the first non-empty batch on; rate excludes that batch."""

    def __init__(self, n: int, timeout_s: float) -> None:
        self.n = n
        self.deadline = time.monotonic() + timeout_s
        self.count = 0
        self.first_batch = 0
        self.start = 0.0
        self.start_cpu = 0.0

    def add(self, batch_size: int) -> None:
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"only {self.count} of {self.n} records arrived")
        if batch_size and not self.count:
            self.start, self.first_batch = time.perf_counter(), batch_size
            self.start_cpu = time.process_time()
        self.count += batch_size

    @property
    def done(self) -> bool:
        return self.count >= self.n

    def rate(self) -> float:
        return (self.count - self.first_batch) / (time.perf_counter() - self.start)

    def cpu_rate(self) -> float:
        """Records per CPU second of this process (less sensitive to other processes' load)."""
        return (self.count - self.first_batch) / (time.process_time() - self.start_cpu)


def raw_consume_rate(
    bootstrap: str, topic: str, n: int, timeout_s: float = 120.0, **consumer_options: Any
) -> float:
    """Records/s of a bare kafka-python consumer that ``json.loads`` each value.

    Reads ``topic`` from the beginning of every partition (``assign``, no group) until ``n``
    records arrived, with the same consumer defaults as ``KafkaSource``.
    """
    return raw_consume_rates(bootstrap, topic, n, timeout_s, **consumer_options)[0]


def raw_consume_rates(
    bootstrap: str, topic: str, n: int, timeout_s: float = 120.0, max_records: int = 5000,
    **consumer_options: Any,
) -> tuple[float, float]:
    """:func:`raw_consume_rate` and the same records per CPU second of this process (polls of
    at most ``max_records``)."""

    def decode(batch: list[ConsumerRecord]) -> None:
        for record in batch:
            json.loads(record.value)

    meter = consume(bootstrap, topic, n, decode, timeout_s, max_records, **consumer_options)
    return meter.rate(), meter.cpu_rate()


def consume(
    bootstrap: str, topic: str, n: int, handle: Callable[[list[ConsumerRecord]], None],
    timeout_s: float = 120.0, max_records: int = 5000, **consumer_options: Any,
) -> SteadyRate:
    """Read ``topic`` from the beginning of every partition (``assign``, no group; the same
    consumer defaults as ``KafkaSource``) until ``n`` records arrived, calling ``handle`` with
    the records of one partition from each poll (of at most ``max_records``); the meter of the
    steady state (from the first records on, which it does not count)."""
    options = {**DEFAULT_CONSUMER_OPTIONS, **consumer_options}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **options)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        consumer.assign([KafkaTopicPartition(topic, p) for p in sorted(partitions)])
        consumer.seek_to_beginning()
        meter = SteadyRate(n, timeout_s)
        while not meter.done:
            batches = consumer.poll(timeout_ms=500, max_records=max_records)
            for batch in batches.values():
                handle(batch)
                meter.add(len(batch))
        return meter
    finally:
        consumer.close(autocommit=False)


# -- the river peer -----------------------------------------------------------------------------


class RiverPeer:
    """What a user would write with river instead of the worker: per stream, ADWIN and
    PageHinkley (river's defaults) on the per-event absolute residual.

    The residual is ``|label - prediction|`` for a number, ``1 - prediction[label]`` (one minus
    the predicted probability of the true class) for a probability vector. A prediction with an
    inline label updates the detectors at once; one without waits in a dict by id until its
    label event arrives (a label before its prediction waits the same way). Nothing is stored,
    no OOD decision is made, no offset is committed: the peer is the floor of "drift detection
    on a Kafka topic", not a like-for-like worker.
    """

    def __init__(self) -> None:
        from river import drift

        self._drift = drift
        self.detectors: dict[str, tuple[Any, Any]] = {}
        self.predictions: dict[str, dict[str, Any]] = {}  # stream -> id -> prediction
        self.labels: dict[str, dict[str, Any]] = {}  # stream -> id -> label arrived first
        self.updates = 0
        self.detections = 0

    def handle(self, batch: list[ConsumerRecord]) -> None:
        for record in batch:
            self.observe(json.loads(record.value))

    def observe(self, event: dict[str, Any]) -> None:
        stream, event_id = event["stream"], event["id"]
        if event["kind"] == "prediction":
            if "label" in event:
                self._update(stream, event["prediction"], event["label"])
            else:
                early = self.labels.get(stream, {}).pop(event_id, None)
                if early is None:
                    self.predictions.setdefault(stream, {})[event_id] = event["prediction"]
                else:
                    self._update(stream, event["prediction"], early)
        else:
            prediction = self.predictions.get(stream, {}).pop(event_id, None)
            if prediction is None:
                self.labels.setdefault(stream, {})[event_id] = event["label"]
            else:
                self._update(stream, prediction, event["label"])

    def _update(self, stream: str, prediction: Any, label: Any) -> None:
        residual = (1.0 - prediction[int(label)] if isinstance(prediction, list)
                    else abs(label - prediction))
        pair = self.detectors.get(stream)
        if pair is None:
            pair = self.detectors[stream] = (self._drift.ADWIN(), self._drift.PageHinkley())
        for detector in pair:
            detector.update(residual)
            self.detections += detector.drift_detected
        self.updates += 1


def peer_consume_rates(
    bootstrap: str, topic: str, n: int, timeout_s: float = 120.0, max_records: int = 5000,
    **consumer_options: Any,
) -> dict[str, float]:
    """Records/s (wall and per CPU second of this process) of :class:`RiverPeer` on ``topic``
    read like :func:`raw_consume_rates`; also its detector updates and detections."""
    peer = RiverPeer()
    meter = consume(bootstrap, topic, n, peer.handle, timeout_s, max_records, **consumer_options)
    return {"rate": meter.rate(), "cpu_rate": meter.cpu_rate(), "updates": peer.updates,
            "detections": peer.detections, "streams": len(peer.detectors)}


def source_consume_rate(
    bootstrap: str, topic: str, n: int, group: str, timeout_s: float = 120.0,
    **consumer_options: Any,
) -> float:
    """Records/s of :class:`connectors.KafkaSource` (group member) plus ``json.loads``."""
    source = KafkaSource(bootstrap, topic, group, **consumer_options)
    try:
        meter = SteadyRate(n, timeout_s)
        while not meter.done:
            records = source.poll(5000, 0.5)
            for record in records:
                json.loads(record.value)
            meter.add(len(records))
        return meter.rate()
    finally:
        source.close()


def wire_events(n: int) -> tuple[list[bytes], list[str]]:
    """``n`` prediction events in the wire format (README "Event format"), keyed by stream name."""
    values, keys = [], []
    for i in range(n):
        stream = f"stream-{i % STREAMS:02d}"
        event = {"kind": "prediction", "stream": stream, "id": f"e-{i:07d}",
                 "ts": "2026-11-30T12:00:00Z", "features": [0.3, 1.2, 5.0], "prediction": 41.7}
        values.append(json.dumps(event).encode())
        keys.append(stream)
    return values, keys


def run(n: int, producer: str, repeat: int) -> dict[str, Any]:
    """Best of ``repeat`` interleaved measurements (the machine is shared: the best is the
    least disturbed one); the broker runs in a child process (:mod:`mock_broker`)."""
    raw = source = 0.0
    values, keys = wire_events(n)
    info: dict[str, float] = {}
    with broker_process({"bench": (values, keys)}, producer=producer, info=info) as bootstrap:
        for i in range(repeat):
            raw = max(raw, raw_consume_rate(bootstrap, "bench", n))
            source = max(source, source_consume_rate(bootstrap, "bench", n, group=f"bench-{i}",
                                                     **MOCK_CONSUMER_OPTIONS))
    return {
        "events": n,
        "repeat": repeat,
        "producer": producer,
        "produce_per_s": round(n / info["produce_s"]),
        "raw_per_s": round(raw),
        "source_per_s": round(source),
        "source_over_raw": round(source / raw, 3),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--producer", choices=["confluent", "kafka-python"], default="confluent")
    parser.add_argument("--repeat", type=int, default=3, help="report the best of N runs")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = run(args.events, args.producer, args.repeat)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['events']} events produced with {result['producer']} "
          f"({result['produce_per_s']:,} events/s)")
    print(f"raw kafka-python + json.loads : {result['raw_per_s']:>10,} events/s")
    print(f"KafkaSource + json.loads      : {result['source_per_s']:>10,} events/s "
          f"({result['source_over_raw']:.2f} x raw)")


if __name__ == "__main__":
    main()
