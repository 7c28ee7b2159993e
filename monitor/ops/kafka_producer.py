"""Replay an example stream into Kafka: the producer of the docker-compose demo.

Two steps, each a subcommand of ``python -m monitor.ops.kafka_producer``:

``prepare --out DIR``
    Writes the example stream built from river's bundled Shuttle data
    (:func:`monitor.ops.datasets.build_example`: stable → benign covariate shift → concept shift →
    extreme covariate shift) as wire-format files: calibration, events, stream configuration.
``produce --events FILE --bootstrap HOST:PORT --topic TOPIC``
    Sends every line of a JSONL events file to a Kafka topic with kafka-python, keyed by the
    event's stream name (so one stream stays on one partition, in order), at ``--rate`` events
    per second. By default each event's ``ts`` is replaced by the time it is sent, so that the
    dashboards' "last hour" shows the replay live; ``--keep-ts`` keeps the recorded times.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["keyed_records", "main", "prepare", "produce"]

Clock = Callable[[], float]


def prepare(out_dir: str | Path, seed: int = 0, label_delay: int = 25) -> dict[str, Path]:
    """Write the demo stream's files into ``out_dir``; returns their paths by role.

    ``label_delay`` predictions arrive before each one's label, so the worker's label join and
    the label-join-lag panel have something to show.
    """
    from monitor.ops.datasets import build_example

    return build_example(out_dir, seed=seed, label_delay=label_delay)


def keyed_records(
    lines: Iterable[str], restamp: bool = True, clock: Clock = time.time
) -> Iterator[tuple[bytes | None, bytes]]:
    """``(key, value)`` Kafka records from JSONL lines: key = the stream name.

    With ``restamp`` the event's ``ts`` becomes ``clock()`` as ISO 8601 UTC. A line that is not
    a JSON object is sent unchanged without a key (the worker stores it as a dead letter).

    Examples
    --------
    >>> line = '{"kind": "label", "stream": "bikes", "id": "e-1", "label": 3}'
    >>> key, value = next(keyed_records([line], clock=lambda: 0.0))
    >>> key, json.loads(value)["ts"]
    (b'bikes', '1970-01-01T00:00:00Z')
    >>> next(keyed_records(["not json"]))
    (None, b'not json')
    """
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        record = _object(line)
        if record is None:
            yield None, line.encode()
            continue
        if restamp:
            record["ts"] = _iso(clock())
        stream = record.get("stream")
        key = stream.encode() if isinstance(stream, str) else None
        yield key, json.dumps(record, separators=(",", ":")).encode()


def _object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _iso(seconds: float) -> str:
    text = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return text.replace(".000+00:00", "Z").replace("+00:00", "Z")


def produce(
    events: str | Path,
    bootstrap: str,
    topic: str,
    rate: float = 50.0,
    restamp: bool = True,
    connect_timeout: float = 60.0,
    clock: Clock = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Send the events file to ``topic``, paced at ``rate`` events/s (0: as fast as possible).

    Returns the number of records sent; every send is acknowledged by the broker (``acks=all``)
    before the function returns.
    """
    if rate < 0:
        raise ValueError(f"rate must be >= 0 events/s, got {rate}")
    producer = _producer(bootstrap, connect_timeout, sleep)
    sent = 0
    start = clock()
    try:
        with Path(events).open(encoding="utf-8") as fh:
            for key, value in keyed_records(fh, restamp, clock):
                _pace(start, sent, rate, clock, sleep)
                producer.send(topic, key=key, value=value)
                sent += 1
        producer.flush()
    finally:
        producer.close()
    return sent


def _pace(
    start: float, sent: int, rate: float, clock: Clock, sleep: Callable[[float], None]
) -> None:
    if rate > 0:
        delay = start + sent / rate - clock()
        if delay > 0:
            sleep(delay)


def _producer(bootstrap: str, connect_timeout: float, sleep: Callable[[float], None]) -> Any:
    """A kafka-python producer; retries while the broker is still starting."""
    from kafka import KafkaProducer
    from kafka.errors import NoBrokersAvailable

    deadline = time.monotonic() + connect_timeout
    while True:
        try:
            return KafkaProducer(
                bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=10, retries=5
            )
        except NoBrokersAvailable:
            if time.monotonic() >= deadline:
                raise
            sleep(1.0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m monitor.ops.kafka_producer", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("prepare", help="write the demo stream's calibration, events and config")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label-delay", type=int, default=25, help="predictions before each label")
    p = sub.add_parser("produce", help="send a JSONL events file to a Kafka topic")
    p.add_argument("--events", required=True, help="JSONL file of wire-format events")
    p.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers HOST:PORT[,...]")
    p.add_argument("--topic", required=True)
    p.add_argument("--rate", type=float, default=50.0, help="events per second (0: unpaced)")
    p.add_argument("--keep-ts", action="store_true", help="keep the recorded event times")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m monitor.ops.kafka_producer``."""
    args = _parser().parse_args(argv)
    if args.command == "prepare":
        paths = prepare(args.out, seed=args.seed, label_delay=args.label_delay)
        for role, path in paths.items():
            print(f"{role}: {path}")
        return 0
    sent = produce(args.events, args.bootstrap, args.topic, args.rate, restamp=not args.keep_ts)
    print(f"sent {sent} records to {args.topic}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
