"""Replays for the reliability tests: several real-data streams spread evenly over partitions.

Each stream is a ``monitor.ops.datasets.build_example`` stream (the bundled Shuttle data with
scripted
shifts, so every stream raises alarms), with its own seed, phases and label delay. Stream names are
chosen so that murmur2 (kafka-python's and Java's partitioner; librdkafka's ``murmur2_random``)
spreads them evenly over the mock broker's 4 partitions: its 5 MiB per partition then holds a
100 000-event replay without deleting anything before it is read (docs/kafka.md).

The result is a :class:`tests.support.streams.Example` (the merged JSONL file and the keyed
Kafka records), so the integration tests' reference run and snapshots apply unchanged.
:func:`produce` writes it to a topic (tombstones allowed); :func:`differences` says in words how
two runs' stored results differ.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import yaml

from connectors.mock_kafka import MockRetentionExceeded, low_watermarks
from monitor.ops.datasets import build_example
from tests.support.streams import Example, Snapshot

_log = logging.getLogger("tests.reliability.producer")

PARTITIONS = 4
#: Candidate stream names (any name works; these read well in logs).
NAMES = (
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
)
#: Phase mixes, as fractions of a stream's predictions (cycled over the streams).
PHASE_MIXES: tuple[tuple[tuple[str, float], ...], ...] = (
    (("stable", 0.4), ("concept", 0.3), ("extreme_covariate", 0.3)),
    (("stable", 0.5), ("benign_covariate", 0.25), ("benign_covariate+concept", 0.25)),
    (("stable", 0.3), ("extreme_covariate", 0.2), ("stable", 0.2), ("concept", 0.3)),
    (("stable", 0.6), ("concept", 0.4)),
)
#: Label delays (in predictions) cycled over the streams; 0 means labels inline.
LABEL_DELAYS = (20, 0, 5, 50)
N_CALIBRATION = 300


def murmur2_partition(key: str, partitions: int = PARTITIONS) -> int:
    from kafka.partitioner.default import DefaultPartitioner

    return int(DefaultPartitioner()(key.encode(), list(range(partitions)), list(range(partitions))))


def spread_names(n: int, partitions: int = PARTITIONS) -> list[str]:
    """``n`` stream names, at most ``ceil(n / partitions)`` per murmur2 partition."""
    cap = math.ceil(n / partitions)
    used = [0] * partitions
    names = []
    for name in NAMES:
        p = murmur2_partition(name, partitions)
        if used[p] < cap:
            used[p] += 1
            names.append(name)
        if len(names) == n:
            return names
    raise ValueError(f"cannot spread {n} streams over {partitions} partitions with {NAMES}")


@dataclass(frozen=True)
class StreamPlan:
    name: str
    seed: int
    predictions: int
    label_delay: int
    phases: tuple[tuple[str, int], ...]

    @property
    def messages(self) -> int:
        return self.predictions * (2 if self.label_delay else 1)


def plan_streams(n_messages: int, n_streams: int, seed: int) -> list[StreamPlan]:
    """Streams whose events (predictions and separate labels) total about ``n_messages``."""
    plans = []
    for i, name in enumerate(spread_names(n_streams)):
        delay = LABEL_DELAYS[i % len(LABEL_DELAYS)]
        messages = n_messages // n_streams
        predictions = messages // 2 if delay else messages
        mix = PHASE_MIXES[i % len(PHASE_MIXES)]
        lengths = [int(f * predictions) for _, f in mix]
        lengths[0] += predictions - sum(lengths)
        phases = tuple((kind, n) for (kind, _), n in zip(mix, lengths, strict=True))
        plans.append(StreamPlan(name, seed * 100 + i, predictions, delay, phases))
    return plans


def build_workload(
    folder: Path,
    n_messages: int,
    n_streams: int = 4,
    seed: int = 0,
    alarm: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Example:
    """Write the streams and the merged events file (round-robin over the streams);
    ``overrides`` are added to every stream's configuration (e.g. ``{"trace_every": 1}``)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines, keys_per_stream, configs = [], [], []
    for plan in plan_streams(n_messages, n_streams, seed):
        paths = build_example(folder, seed=plan.seed, phases=plan.phases, stream=plan.name,
                              n_calibration=N_CALIBRATION, label_delay=plan.label_delay,
                              alarm=alarm or {"rule": "shiryaev_roberts", "threshold": 1000})
        if overrides:
            config = yaml.safe_load(paths["config"].read_text()) | overrides
            paths["config"].write_text(yaml.safe_dump(config, sort_keys=False))
        configs.append(paths["config"])
        lines.append(paths["events"].read_bytes().splitlines())
        keys_per_stream.append(plan.name)
    merged: list[tuple[str, bytes]] = []
    for i in range(max(len(s) for s in lines)):  # round-robin over the streams
        merged += [(n, s[i]) for n, s in zip(keys_per_stream, lines, strict=True) if i < len(s)]
    return _write(folder, tuple(configs), merged, ())


def with_extra(example: Example, extra: Sequence[tuple[str, bytes]], name: str) -> Example:
    """The example with ``extra`` ``(key, value)`` records spread evenly through it, written to
    ``<folder>/<name>/``."""
    merged = list(zip(example.keys, example.values, strict=True))
    return _write(example.folder / name, example.configs, merged, extra)


def _write(folder: Path, configs: tuple[Path, ...], merged: list[tuple[str, bytes]],
           extra: Sequence[tuple[str, bytes]]) -> Example:
    step = len(merged) / (len(extra) + 1)
    for j in reversed(range(len(extra))):  # from the end, so earlier positions stay put
        merged.insert(int(step * (j + 1)), extra[j])
    folder.mkdir(parents=True, exist_ok=True)
    events = folder / "all_events.jsonl"
    events.write_bytes(b"".join(v + b"\n" for _, v in merged))
    return Example(folder, configs, events, tuple(v for _, v in merged),
                   tuple(k for k, _ in merged))


# -- producing ---------------------------------------------------------------------------------


def produce(
    bootstrap: str, topic: str, values: Sequence[bytes | None], keys: Sequence[str | bytes | None]
) -> list[tuple[int, int]]:
    """Produce keyed records with librdkafka's murmur2 partitioner (the one kafka-python and Java
    use), in 1 MB batches; ``None`` values are tombstones. Returns each ``(partition, offset)``.

    Raises :class:`MockRetentionExceeded` if the broker already deleted records."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "partitioner": "murmur2_random", "linger.ms": 50,
        "batch.size": 1_000_000, "message.max.bytes": 10_000_000, "logger": _log,
    })
    placed: dict[int, tuple[int, int]] = {}
    errors: list[str] = []

    def delivered(index: int) -> Any:
        def callback(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                placed[index] = (msg.partition(), msg.offset())
        return callback

    for i, (value, key) in enumerate(zip(values, keys, strict=True)):
        key_bytes = key.encode() if isinstance(key, str) else key
        while True:
            try:
                producer.produce(topic, value=value, key=key_bytes, on_delivery=delivered(i))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    getattr(producer, "close", lambda: None)()  # confluent-kafka >= 2.6; else on collection
    if left or errors:
        raise RuntimeError(f"{left} records undelivered, errors: {errors[:3]}")
    lost = {p: o for p, o in low_watermarks(bootstrap, topic).items() if o > 0}
    if lost:
        raise MockRetentionExceeded(f"the mock broker deleted records of {topic}: {lost}")
    return [placed[i] for i in range(len(values))]


# -- comparing results ---------------------------------------------------------------------------


def differences(got: Snapshot, want: Snapshot) -> list[str]:
    """What differs between two runs' results (dead letters excluded), as readable lines."""
    out = []
    if got.alarms != want.alarms:
        out.append(f"alarms: {len(got.alarms)} vs {len(want.alarms)}; first differing: "
                   f"{_first_difference(got.alarms, want.alarms)}")
    if sorted(got.checkpoints) != sorted(want.checkpoints):
        out.append(f"checkpoint streams {sorted(got.checkpoints)} vs {sorted(want.checkpoints)}")
    for stream in sorted(set(got.checkpoints) & set(want.checkpoints)):
        if got.checkpoints[stream] != want.checkpoints[stream]:
            out.append(f"checkpoint of {stream} differs")
    for name in ("trace_points", "ood_windows", "ood_flags"):
        a, b = getattr(got, name), getattr(want, name)
        if a != b:
            out.append(f"{name}: {len(a)} vs {len(b)}; first differing: {_first_difference(a, b)}")
    return out


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> Any:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return (x, y)
    return "one is a prefix of the other"

