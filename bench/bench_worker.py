"""End-to-end throughput of the worker beside a raw consumer and a river peer, where its time
goes, the cost of checkpoints, and its memory over a long replay.

Events: four stationary streams drawn (with replacement) from the bundled Shuttle pool with their
model's predictions, keyed by stream name onto the four partitions of topic ``events``; two
streams carry their labels inline, two send them as separate label events 50 predictions later.
Topic ``alone`` holds one stream (labels inline, one partition key); topic ``wide`` one
synthetic stream of 10 features with 2 000 calibration rows (``bench_memory.SyntheticStream``:
Gaussian features, a fixed linear model, labels inline). Every stream uses the default
configuration (weighted conformal test martingales, kNN covariate score, eg-BH OOD decisions
on) with 1 000 calibration events unless said otherwise.

The mock Kafka broker (librdkafka) runs in a child process (``bench/mock_broker.py``) that
produced both topics; every consumer measured here reads from it over loopback, so the broker's
threads are not this process's CPU time (they still share the machine's cores). Its consumer
groups join without the mock's 3 s initial delay.

Figures (steady state: from the end of the first batch to the last record, so the group join
does not count; wall clock AND CPU time of this process, which runs one consumer at a time;
median of ``rounds`` interleaved runs, all on the same broker):

``raw_consume_per_s``        a bare kafka-python consumer that ``json.loads`` every value of
                             ``events`` (``raw_alone_per_s``: of ``alone``), polling at most 500
                             records at a time like the worker;
``kafka_to_postgres_per_s``  ``KafkaSource`` → ``Pipeline`` → ``DatabaseSink`` (PostgreSQL, a fresh
                             database per run), batches of 500, offsets committed after each
                             transaction (``monitor run``), four streams;
``*_rdkafka_*``              the same worker cases with ``RdKafkaSource`` (librdkafka,
                             ``?client=confluent``) in place of ``KafkaSource``, and
                             ``rdkafka_over_kafka_python*``: their ratios to kafka-python's;
``one_stream_per_s``         the same, one stream alone (topic ``alone``; goal ≥ 25 000/s; see
                             :data:`CONSUMER_OPTIONS` for what its wall clock also measures);
``river_peer_per_s``         river's ADWIN + PageHinkley per stream on the absolute residual, in a
                             kafka-python + ``json.loads`` loop joining labels by id (a dict);
``*_cpu_per_s``              the same per CPU second of this process (``time.process_time``):
                             steadier than wall-clock rates on a shared machine;
``kafka_over_raw``           worker / raw (the acceptance of issue #13: ≥ 0.5, wall clock);
                             ``peer_over_raw``, ``kafka_over_peer``, ``*_cpu``: the other ratios;
``file_*``                   the same events from a JSONL file: a bare ``json.loads`` loop, and
                             ``FileSource`` → pipeline → nothing, SQLite, PostgreSQL
                             (``sqlite_over_json_loads``: goal ≥ 0.25);
``profile``                  µs per record of each stage of :data:`STAGES` (cProfile cumulative
                             time of a Kafka → PostgreSQL run over the records profiled), four
                             streams (``profile_alone``: one stream);
``checkpoints``              Kafka → PostgreSQL at ``checkpoint_every`` N: events/s, and the most
                             records a crash makes the worker replay (N batches);
``rss``                      resident memory of a worker (file → PostgreSQL) over a long replay of
                             one stream, default configuration vs ``weighted: false`` with
                             ``max_reference`` (each in a fresh process);
``acceptance``               per client (kafka-python, confluent) at ``monitor run``'s defaults:
                             worker / raw of its topic for 4 streams (goal ≥ 0.5), one stream
                             (≥ 0.45) and the wide stream (≥ 0.4), wall clock and CPU, the river
                             peer / raw on the same topic beside them, and ``met`` (both ≥ goal);
``calibration_costs``        ``Pipeline.process`` alone (records encoded beforehand, no source, no
                             storage) on one synthetic stream at m calibration rows × d features
                             (:data:`CALIBRATION_SIZES` × :data:`FEATURE_COUNTS`): CPU µs per
                             record and events/s, and CPU at m = 8 000 / m = 1 000, d = 10
                             (goal ≤ 1.5);
``checkpoint_sizes``         one stream's checkpoint (``bench_memory.life_stream``) at 10 k, 100 k
                             and 1 M events: ``encode_state`` whole, the chunked write's row and
                             pieces, and what the next batch's checkpoint sends.

Usage::

    .venv/bin/python bench/bench_worker.py            # full size (several minutes)
    .venv/bin/python bench/bench_worker.py --quick    # seconds
    .venv/bin/python bench/bench_worker.py --json     # one JSON object (bench/harness.py)
    .venv/bin/python bench/bench_worker.py --rounds 5 --checkpoints 1,10,20
    .venv/bin/python bench/bench_worker.py --fetch-max-wait-ms 10 --profile-clock cpu
    .venv/bin/python bench/bench_worker.py --parts calibration_costs,checkpoint_sizes  # no broker
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import math
import os
import platform
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
for _path in (str(ROOT), str(ROOT / "bench")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from bench_db import fresh_database  # noqa: E402
from bench_kafka import peer_consume_rates, raw_consume_rates  # noqa: E402
from bench_memory import SyntheticStream, life_stream, state_trace  # noqa: E402
from mock_broker import broker_process  # noqa: E402

from connectors import FileSource, KafkaSource, RdKafkaSource  # noqa: E402
from connectors.mock_kafka import MOCK_CONSUMER_OPTIONS, MOCK_RDKAFKA_CONFIG  # noqa: E402
from monitor.db.sink import DatabaseSink  # noqa: E402
from monitor.engine.pipeline import BatchOutput, Pipeline  # noqa: E402
from monitor.engine.worker import NullSink, Sink, StopFlag, Worker  # noqa: E402
from monitor.ops.datasets import load_shuttle_regression  # noqa: E402
from monitor.streams.setup import build_monitors, read_configs  # noqa: E402

#: Stages of the worker's time: (label, file suffix, function) whose cProfile cumulative time,
#: divided by the records profiled, is reported in µs per record. A label indented by two
#: spaces is a part of the stage above it (not added again into "other"). A function that does
#: not exist (renamed, or not yet written) shows 0: edit this list as the pipeline changes.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("poll: KafkaSource.poll (fetch + Record)", "connectors/kafka.py", "poll"),
    ("poll: RdKafkaSource.poll (librdkafka queue + Record)", "connectors/rdkafka.py", "poll"),
    ("pipeline: Pipeline.process", "monitor/engine/pipeline.py", "process"),
    ("  decode_batch (msgspec; pydantic for rejections)", "monitor/streams/events.py",
     "decode_batch"),
    ("  StreamMonitor.step (a stream's batch)", "monitor/streams/monitor.py", "step"),
    ("    StreamDetectors.update_batch (both monitors)",
     "monitor/streams/detector_batches.py",
     "update_batch"),
    ("      CovariateMonitor.update_batch (kNN + CTM)", "monitor/core/detectors/covariate.py",
     "update_batch"),
    ("      ConditionalMonitor.update_batch (WCTM)", "monitor/core/detectors/conditional.py",
     "update_batch"),
    ("    OODDecider.add_many (scorers + eg-BH)", "monitor/core/decisions/decider.py", "add_many"),
    ("state_dict (checkpoint states)", "monitor/streams/monitor_versions.py", "state_dict"),
    ("persist: DatabaseSink.persist (encode + transaction)", "monitor/db/sink.py", "persist"),
    ("commit: KafkaSource.commit (offsets to Kafka)", "connectors/kafka.py", "commit"),
    ("commit: RdKafkaSource.commit (offsets to Kafka)", "connectors/rdkafka.py", "commit"),
)
#: What the stages are a part of (their total, and "other" = total - the top-level stages).
TOTAL_STAGE = ("monitor/engine/worker.py", "run")

#: Stream names whose murmur2 partitions (of 4) are 0, 1, 2, 3; label delay of each.
STREAMS: tuple[tuple[str, int], ...] = (("alpha", 0), ("bikes", 0), ("taxis", 50), ("loans", 50))
N_CALIBRATION = 1000
BATCH = 500
#: kafka-python options added to every consumer of the bench (raw, peer, worker): empty, i.e.
#: the worker's defaults, unless ``--fetch-max-wait-ms`` is given. Topic ``alone`` has records
#: in one of its four partitions: while the consumer drains the records it has buffered, its
#: next fetch asks for the three empty partitions only, the broker holds that fetch for
#: ``fetch_max_wait_ms`` (500 ms by default; a real broker does the same), and no other fetch
#: goes to that broker meanwhile, so the consumer waits up to 500 ms every ~1 MB fetched
#: (15 000 records: ~5 s of waits at 500 ms, none at 10 ms; a consumer assigned only the busy
#: partition does not wait). The wall-clock rates of the one-stream topic measure those waits,
#: its CPU times do not; ``--fetch-max-wait-ms 10`` removes them for every consumer alike.
CONSUMER_OPTIONS: dict[str, Any] = {}
GOALS = {"kafka_over_raw": 0.5, "one_stream_per_s": 25_000, "sqlite_over_json_loads": 0.25}


#: The cost table's calibration sizes m and feature counts d, and its acceptance: CPU per record
#: at m = 8 000 at most 1.5 × that at m = 1 000, both at d = 10.
CALIBRATION_SIZES: tuple[int, ...] = (500, 1000, 2000, 8000)
FEATURE_COUNTS: tuple[int, ...] = (5, 10, 50)
CALIBRATION_RATIO = ((8000, 10), (1000, 10), 1.5)
#: The wide stream (topic ``wide``): features and calibration rows.
WIDE = (10, 2000)
#: Kafka acceptance: (name, worker case at ``monitor run``'s defaults, raw case of its topic,
#: the river peer's case on that topic, goal ≥ worker / raw in wall clock and CPU time).
ACCEPTANCE: tuple[tuple[str, str, str, str, float], ...] = (
    ("4 streams", "worker_defaults", "raw", "peer", 0.5),
    ("1 stream", "worker_alone_defaults", "raw_alone", "peer_alone", 0.45),
    ("1 stream, 10 features, 2 000 calibration rows", "worker_wide_defaults", "raw_wide",
     "peer_wide", 0.4),
)
CLIENTS = {"kafka-python": "", "confluent": "_rdkafka"}


@dataclass(frozen=True)
class Sizes:
    predictions_per_stream: int
    alone_predictions: int  # the one-stream topic (a single partition: ≤ ~20 000, see docs)
    rss_events: int
    rounds: int  # median of this many interleaved runs per case
    checkpoints: tuple[int, ...]
    rss_max_reference: int = 500
    calibration_events: int = 20_000  # events timed per cell of the cost table
    checkpoint_marks: tuple[int, ...] = (10_000, 100_000, 1_000_000)


FULL = Sizes(predictions_per_stream=5000, alone_predictions=15_000, rss_events=20_000, rounds=3,
             checkpoints=(1, 5, 10, 50))
QUICK = Sizes(predictions_per_stream=200, alone_predictions=1500, rss_events=1_500, rounds=1,
              checkpoints=(1, 10), calibration_events=1000, checkpoint_marks=(1000, 5000))


# -- events -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    configs: list[str]
    events: Path
    values: list[bytes]
    keys: list[str]


def write_stream(folder: Path, name: str, seed: int, n: int, label_delay: int,
                 extra: dict[str, Any] | None = None) -> tuple[str, list[bytes]]:
    """Calibration file, configuration and the events (wire format) of one stationary stream."""
    task = load_shuttle_regression()
    rng = np.random.default_rng(seed)
    cal, rows = rng.integers(0, task.y.size, N_CALIBRATION), rng.integers(0, task.y.size, n)
    with (folder / f"{name}_calibration.jsonl").open("w") as fh:
        for i, r in enumerate(cal.tolist()):
            fh.write(json.dumps({"kind": "prediction", "stream": name, "id": f"c-{i}",
                                 "features": task.X[r].tolist(), "prediction": float(task.pred[r]),
                                 "label": float(task.y[r])}) + "\n")
    config = {"name": name, "task": "regression", "calibration": f"{name}_calibration.jsonl",
              "seed": seed, **(extra or {})}
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(config))
    return str(folder / f"{name}.yaml"), _events(task, name, rows, label_delay)


def _events(task: Any, name: str, rows: np.ndarray, delay: int) -> list[bytes]:
    out: list[bytes] = []
    for i, r in enumerate(rows.tolist()):
        ts = f"2026-01-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
        event = {"kind": "prediction", "stream": name, "id": f"e-{i:07d}", "ts": ts,
                 "features": task.X[r].tolist(), "prediction": float(task.pred[r])}
        if delay == 0:
            event["label"] = float(task.y[r])
        out.append(json.dumps(event, separators=(",", ":")).encode())
        if delay and i >= delay:
            j = i - delay
            out.append(json.dumps({"kind": "label", "stream": name, "id": f"e-{j:07d}", "ts": ts,
                                   "label": float(task.y[rows[j]])}).encode())
    return out


def workload(folder: Path, n: int) -> Workload:
    """The four streams, merged round-robin into one JSONL file and one keyed record list."""
    configs, per_stream = [], []
    for seed, (name, delay) in enumerate(STREAMS):
        config, events = write_stream(folder, name, seed, n, delay)
        configs.append(config)
        per_stream.append(events)
    values: list[bytes] = []
    keys: list[str] = []
    for i in range(max(len(e) for e in per_stream)):
        for (name, _), events in zip(STREAMS, per_stream, strict=True):
            if i < len(events):
                values.append(events[i])
                keys.append(name)
    path = folder / "events.jsonl"
    path.write_bytes(b"".join(v + b"\n" for v in values))
    return Workload(configs, path, values, keys)


def one_stream(folder: Path, n: int) -> Workload:
    """One stream alone (labels inline), all records under one key (one partition)."""
    folder.mkdir(parents=True, exist_ok=True)
    name = STREAMS[0][0]
    config, values = write_stream(folder, name, 11, n, 0)
    path = folder / "events.jsonl"
    path.write_bytes(b"".join(v + b"\n" for v in values))
    return Workload([config], path, values, [name] * len(values))


#: What the wide topic's one partition may hold: below the mock broker's 5 MiB per partition
#: (connectors/mock_kafka.py), with each record's overhead in the log.
WIDE_PARTITION_BYTES = 4_500_000
RECORD_OVERHEAD = 80


def wide_stream(folder: Path, n: int) -> Workload:
    """One synthetic stream of :data:`WIDE` features and calibration rows (labels inline), all
    records under one key: at most ``n``, and no more than one partition of the mock broker
    keeps (:data:`WIDE_PARTITION_BYTES`; its records are larger than the other topics')."""
    folder.mkdir(parents=True, exist_ok=True)
    features, m = WIDE
    stream = SyntheticStream("wide", features, 13)
    config = stream.write_config(folder, m)
    values = stream.values(n)
    sizes = np.cumsum([len(v) + RECORD_OVERHEAD for v in values])
    values = values[: int(np.searchsorted(sizes, WIDE_PARTITION_BYTES, side="right"))]
    path = folder / "events.jsonl"
    path.write_bytes(b"".join(v + b"\n" for v in values))
    return Workload([config], path, values, ["wide"] * len(values))


# -- timed runs ---------------------------------------------------------------------------------


class Meter:
    """Steady-state rate: events from the end of the first batch to the end of the last."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.marks: list[tuple[float, int]] = []
        self.cpu_marks: list[float] = []
        self.stop = StopFlag()

    def batch(self) -> Callable[[BatchOutput], None]:
        # Counted from each output: with interval checkpoints the worker's summary only moves
        # at checkpoints (no batch is replayed here).
        def on_batch(out: BatchOutput) -> None:
            self.done += out.events + len(out.dead_letters)
            self.marks.append((time.perf_counter(), self.done))
            self.cpu_marks.append(time.process_time())
            if self.done >= self.total:
                self.stop.set()
        return on_batch

    def rate(self, start: float) -> float:
        """Steady state from the first batch on; from ``start`` if there are too few batches."""
        (t0, n0), (t1, n1) = self.marks[0], self.marks[-1]
        if len(self.marks) < 3:
            t0, n0 = start, 0
        return (n1 - n0) / (t1 - t0)

    def cpu_rate(self, start_cpu: float) -> float:
        """Events per CPU second of this process over the same steady state (the database
        server's and the broker's CPU are not included); from ``start_cpu`` like :meth:`rate`."""
        (c0, n0), (c1, n1) = (self.cpu_marks[0], self.marks[0][1]), (self.cpu_marks[-1],
                                                                      self.marks[-1][1])
        if len(self.marks) < 3:
            c0, n0 = start_cpu, 0
        return (n1 - n0) / (c1 - c0) if c1 > c0 else math.nan


@dataclass(frozen=True)
class Rates:
    """One run: events per wall-clock second and per CPU second; records after the first
    batch (what a profile of the run covers)."""

    wall: float
    cpu: float
    steady_records: int = 0


def run_worker(source: Any, configs: list[str], sink: Sink, kind: str, total: int,
               profile: cProfile.Profile | None = None, batch: int = BATCH,
               checkpoint_every: int = 1) -> Rates:
    """Rates of one worker over ``total`` records (the source is closed afterwards); the first
    batch (group join, first fetch) is neither timed nor profiled."""
    pipeline = Pipeline(build_monitors(read_configs(configs)), source.name)
    worker = Worker(source, pipeline, sink, kind, batch_size=batch,
                    checkpoint_every=checkpoint_every)
    meter = Meter(total)
    worker.on_batch = meter.batch()
    start, start_cpu = time.perf_counter(), time.process_time()
    try:
        worker.run(meter.stop, max_batches=1)  # joins the group: not part of the profile
        if profile is not None:
            profile.enable()
        worker.run(meter.stop)
    finally:
        if profile is not None:
            profile.disable()
        source.close()
    assert meter.marks[-1][1] == total, f"processed {meter.marks[-1][1]} of {total}"
    return Rates(meter.rate(start), meter.cpu_rate(start_cpu), total - meter.marks[0][1])


@contextmanager
def sink_for(target: str) -> Iterator[Sink]:
    if target == "none":
        yield NullSink()
        return
    with fresh_database(target) as url:
        sink = DatabaseSink(url)
        try:
            yield sink
        finally:
            sink.close()


def kafka_source(client: str, bootstrap: str, topic: str, group: str) -> Any:
    """The worker's source on the mock broker: ``client`` ``kafka-python`` (``KafkaSource``) or
    ``confluent`` (``RdKafkaSource``), with :data:`CONSUMER_OPTIONS`."""
    if client == "confluent":
        wait = CONSUMER_OPTIONS.get("fetch_max_wait_ms")
        extra = {} if wait is None else {"fetch.wait.max.ms": wait}
        return RdKafkaSource(bootstrap, topic, group, **{**MOCK_RDKAFKA_CONFIG, **extra})
    return KafkaSource(bootstrap, topic, group, **MOCK_CONSUMER_OPTIONS, **CONSUMER_OPTIONS)


def kafka_worker(bootstrap: str, topic: str, group: str, work: Workload,
                 profile: cProfile.Profile | None = None, checkpoint_every: int = 1,
                 batch: int = BATCH, client: str = "kafka-python") -> Rates:
    """Kafka → pipeline → PostgreSQL (a fresh database) over every record of ``topic``."""
    with sink_for("postgresql") as sink:
        source = kafka_source(client, bootstrap, topic, group)
        return run_worker(source, work.configs, sink, "kafka", len(work.values), profile,
                          checkpoint_every=checkpoint_every, batch=batch)


def cli_defaults() -> tuple[int, int]:
    """``monitor run``'s batch size and checkpoint interval when none is given."""
    from monitor.settings import Settings

    defaults = Settings()
    return defaults.batch_size, defaults.checkpoint_every


def median_case(runs: list[Rates]) -> dict[str, Any]:
    """Median of the runs' wall-clock and CPU rates (each on its own), CPU µs per record."""
    wall = statistics.median(r.wall for r in runs)
    cpu = statistics.median(r.cpu for r in runs)
    return {"per_s": round(wall), "cpu_per_s": _round(cpu),
            "cpu_us_per_record": _round(1e6 / cpu, 2) if cpu > 0 else math.nan,
            "runs_per_s": [round(r.wall) for r in runs],
            "runs_cpu_per_s": [_round(r.cpu) for r in runs]}


def _round(value: float, digits: int = 0) -> float:
    return value if math.isnan(value) else round(value, digits or None)


#: The cases of the Kafka comparison, in the order of a round; a worker case ending in
#: ``_rdkafka`` is the same case with librdkafka (:func:`worker_case`).
KAFKA_CASES = ("raw", "raw_alone", "raw_wide", "worker", "worker_alone", "peer", "peer_alone",
               "peer_wide", "worker_defaults", "worker_alone_defaults", "worker_wide_defaults",
               "worker_rdkafka", "worker_alone_rdkafka", "worker_defaults_rdkafka",
               "worker_alone_defaults_rdkafka", "worker_wide_defaults_rdkafka")
#: The topic a case reads (by the case name's prefix; the rest read ``events``).
CASE_TOPICS = (("worker_alone", "alone"), ("worker_wide", "wide"), ("raw_alone", "alone"),
               ("raw_wide", "wide"), ("peer_alone", "alone"), ("peer_wide", "wide"))


def case_topic(case: str) -> str:
    """The topic of a case of :data:`KAFKA_CASES`."""
    return next((topic for prefix, topic in CASE_TOPICS if case.startswith(prefix)), "events")


def worker_case(bootstrap: str, case: str, i: int, loads: dict[str, Workload]) -> Rates:
    """One run of a worker case of :data:`KAFKA_CASES` (round ``i``) on its topic's workload
    in ``loads``."""
    client = "confluent" if case.endswith("_rdkafka") else "kafka-python"
    base = case.removesuffix("_rdkafka")
    topic = case_topic(base)
    batch, every = cli_defaults() if base.endswith("_defaults") else (BATCH, 1)
    return kafka_worker(bootstrap, topic, f"bench-{case}-{i}", loads[topic],
                        checkpoint_every=every, batch=batch, client=client)


def kafka_comparison(bootstrap: str, loads: dict[str, Workload], rounds: int) -> dict[str, Any]:
    """Every case of :data:`KAFKA_CASES` ``rounds`` times, interleaved (odd rounds in reverse
    order, so that a load that changes during the run favours no case); medians. ``loads``:
    the workload of each topic."""
    runs: dict[str, list[Rates]] = {case: [] for case in KAFKA_CASES}
    detections: dict[str, list[int]] = {}
    for i in range(rounds):
        for case in KAFKA_CASES[:: 1 if i % 2 == 0 else -1]:
            topic = case_topic(case)
            n = len(loads[topic].values)
            if case.startswith("raw"):
                runs[case].append(Rates(*raw_consume_rates(bootstrap, topic, n,
                                                           max_records=BATCH,
                                                           **CONSUMER_OPTIONS)))
            elif case.startswith("worker"):
                runs[case].append(worker_case(bootstrap, case, i, loads))
            else:
                peer = peer_consume_rates(bootstrap, topic, n, max_records=BATCH,
                                          **CONSUMER_OPTIONS)
                runs[case].append(Rates(peer["rate"], peer["cpu_rate"]))
                detections.setdefault(case, []).append(int(peer["detections"]))
    out = {case: median_case(r) for case, r in runs.items()}
    for case, found in detections.items():
        out[case]["detections"] = found
    return out


def acceptance(kafka: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per client and case of :data:`ACCEPTANCE`: worker / raw and the river peer / raw, wall
    clock and CPU time, and ``met`` (both of the worker's ratios at least the goal; None where
    a case was not measured: results of an older bench)."""
    missing = {"per_s": math.nan, "cpu_per_s": math.nan}
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for client, suffix in CLIENTS.items():
        out[client] = {}
        for name, worker, raw, peer, goal in ACCEPTANCE:
            w, r, p = (kafka.get(c, missing) for c in (worker + suffix, raw, peer))
            ratios = {"wall": _ratio(w["per_s"], r["per_s"], 3),
                      "cpu": _ratio(w["cpu_per_s"], r["cpu_per_s"], 3),
                      "peer_wall": _ratio(p["per_s"], r["per_s"], 3),
                      "peer_cpu": _ratio(p["cpu_per_s"], r["cpu_per_s"], 3)}
            met = None if math.isnan(ratios["wall"] + ratios["cpu"]) else bool(
                ratios["wall"] >= goal and ratios["cpu"] >= goal)
            out[client][name] = {"goal": goal, "case": worker + suffix, **ratios, "met": met}
    return out


#: cProfile's clocks: elapsed time (waits for the database and the broker included), or CPU
#: time of this process (steadier on a shared machine; costlier to read, so more overhead).
PROFILE_CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter,
                                                  "cpu": time.process_time}


def profiled_stages(bootstrap: str, topic: str, work: Workload,
                    clock: str = "wall", client: str = "kafka-python") -> dict[str, Any]:
    """A cProfile'd Kafka → PostgreSQL run of ``topic``: µs per record of each stage."""
    profile = cProfile.Profile(PROFILE_CLOCKS[clock])
    rates = kafka_worker(bootstrap, topic, f"bench-profiled-{topic}-{client}", work, profile,
                         client=client)
    return {"clock": clock, **stage_costs(profile, rates.steady_records)}


def checkpoint_rates(bootstrap: str, work: Workload, every: Sequence[int],
                     rounds: int) -> list[dict[str, Any]]:
    """Kafka → PostgreSQL (four streams) at each ``checkpoint_every``, interleaved rounds."""
    runs: dict[int, list[Rates]] = {n: [] for n in every}
    for i in range(rounds):
        for n in list(every)[:: 1 if i % 2 == 0 else -1]:
            runs[n].append(kafka_worker(bootstrap, "events", f"bench-ckpt-{n}-{i}", work,
                                        checkpoint_every=n))
    out = []
    for n, r in runs.items():
        case = median_case(r)
        replay = n * BATCH
        out.append({"checkpoint_every": n, **case, "replay_records_max": replay,
                    "replay_s_at_rate": round(replay / case["per_s"], 2)})
    return out


#: File runs: name → (sink, batch size); cheap ones only (checkpoints: see checkpoint_rates).
FILE_CASES: dict[str, tuple[str, int]] = {
    "none": ("none", BATCH),
    "sqlite": ("sqlite", BATCH),
    "postgres": ("postgresql", BATCH),
    "postgres_batch_2000": ("postgresql", 2000),
}


def json_loads_rates(path: Path) -> Rates:
    """A bare loop that reads the JSONL file and ``json.loads`` every line."""
    start, start_cpu = time.perf_counter(), time.process_time()
    n = 0
    with path.open("rb") as fh:
        for line in fh:
            json.loads(line)
            n += 1
    return Rates(n / (time.perf_counter() - start), n / (time.process_time() - start_cpu))


def file_rates(work: Workload, rounds: int) -> dict[str, dict[str, Any]]:
    """Median of ``rounds`` interleaved runs per case, beside the bare ``json.loads`` loop."""
    runs: dict[str, list[Rates]] = {name: [] for name in ("json_loads", *FILE_CASES)}
    for i in range(rounds):
        for name in list(runs)[:: 1 if i % 2 == 0 else -1]:
            if name == "json_loads":
                runs[name].append(json_loads_rates(work.events))
                continue
            target, batch = FILE_CASES[name]
            with sink_for(target) as sink:
                runs[name].append(run_worker(FileSource(work.events), work.configs, sink, "file",
                                             len(work.values), batch=batch))
    return {name: median_case(r) for name, r in runs.items()}


def stage_costs(profile: cProfile.Profile, records: int) -> dict[str, Any]:
    """µs per record of each stage of :data:`STAGES` (cumulative time / ``records``), of their
    total (``Worker.run``) and of the rest of it ("other": the total less the top-level
    stages); 0 for a function the profile does not contain."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    cumulative: dict[tuple[str, str], float] = {}
    for (filename, _, function), (_, _, _, cum, _) in stats.items():
        key = (filename.replace("\\", "/"), function)
        cumulative[key] = max(cumulative.get(key, 0.0), cum)

    def us(suffix: str, function: str) -> float:
        seconds = max((t for (f, fn), t in cumulative.items()
                       if f.endswith(suffix) and fn == function), default=0.0)
        return round(seconds * 1e6 / max(records, 1), 2)

    total = us(*TOTAL_STAGE)
    stages = {label: us(suffix, fn) for label, suffix, fn in STAGES}
    top = sum(t for label, t in stages.items() if not label.startswith(" "))
    stages["other (routing, join, records, loop)"] = round(total - top, 2)
    return {"records": records, "total_us_per_record": total, "stages_us_per_record": stages}
# -- cost per record by calibration size and feature count, checkpoint size over life -----------


def pipeline_rates(m: int, d: int, events: int, batch: int) -> Rates:
    """``Pipeline.process`` alone (records encoded beforehand; no source, no storage) over
    ``events`` records of a synthetic stream of ``d`` features (labels inline) with ``m``
    calibration rows, in batches of ``batch``; a first batch untimed (warm-up)."""
    stream = SyntheticStream(f"m{m}-d{d}", d, m * 1000 + d)
    with tempfile.TemporaryDirectory() as tmp:
        pipeline = Pipeline(build_monitors(read_configs([stream.write_config(Path(tmp), m)])),
                            "bench")
    warm_up = stream.records(batch)
    batches = [stream.records(min(batch, events - k)) for k in range(0, events, batch)]
    pipeline.process(warm_up)
    start, start_cpu = time.perf_counter(), time.process_time()
    for records in batches:
        out = pipeline.process(records)
        assert not out.dead_letters, out.dead_letters[0].reason
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return Rates(events / wall, events / cpu if cpu > 0 else math.nan, events)


def calibration_costs(sizes: Sizes) -> dict[str, Any]:
    """CPU µs and events/s per record of one stream in-process at every calibration size ×
    feature count (median of ``rounds`` interleaved passes), and the acceptance ratio."""
    batch = cli_defaults()[0]
    grid = [(m, d) for m in CALIBRATION_SIZES for d in FEATURE_COUNTS]
    runs: dict[tuple[int, int], list[Rates]] = {cell: [] for cell in grid}
    for i in range(sizes.rounds):
        for m, d in grid[:: 1 if i % 2 == 0 else -1]:
            runs[m, d].append(pipeline_rates(m, d, sizes.calibration_events, batch))
    cells = [{"m": m, "d": d, **median_case(r)} for (m, d), r in runs.items()]
    (high, low, goal) = CALIBRATION_RATIO
    cost = {(c["m"], c["d"]): c for c in cells}
    ratio = _ratio(cost[high]["cpu_us_per_record"], cost[low]["cpu_us_per_record"], 3)
    ratio_wall = _ratio(cost[low]["per_s"], cost[high]["per_s"], 3)
    return {"what": "Pipeline.process alone: records encoded beforehand, no source, no storage",
            "data": "synthetic Gaussian features, a fixed linear regression model, labels "
                    "inline; seeded", "events": sizes.calibration_events, "batch": batch,
            "rounds": sizes.rounds, "cells": cells,
            "ratio": {"of": f"m = {high[0]} / m = {low[0]} at d = {high[1]}", "cpu": ratio,
                      "wall": ratio_wall, "goal": goal, "met": bool(ratio <= goal)}}


def checkpoint_sizes(sizes: Sizes) -> dict[str, Any]:
    """The bytes of one stream's checkpoint (default configuration, :func:`life_stream`) at
    each of ``sizes.checkpoint_marks`` events: encoded whole, and as the chunked write."""
    stream = life_stream(3)
    with tempfile.TemporaryDirectory() as tmp:
        trace = state_trace(stream, stream.write_config(Path(tmp), N_CALIBRATION),
                            sizes.checkpoint_marks)
    keep = ("events", "encoded_bytes", "row_bytes", "pieces", "pieces_bytes", "sent_next_bytes",
            "alarms")
    return {"stream": {"features": stream.d, "calibration": N_CALIBRATION,
                       "label_delay": stream.delay, "unlabeled_every": stream.unlabeled_every},
            "batch": trace["batch"],
            "points": [{k: p[k] for k in keep} for p in trace["points"]]}


#: The parts of the report measured in this process without a broker or a database.
IN_PROCESS_PARTS: dict[str, Callable[[Sizes], dict[str, Any]]] = {
    "calibration_costs": calibration_costs, "checkpoint_sizes": checkpoint_sizes}


def in_process_parts(sizes: Sizes, parts: Sequence[str]) -> dict[str, Any]:
    """The ``parts`` of :data:`IN_PROCESS_PARTS`, each with the load and time it was run at."""
    out: dict[str, Any] = {}
    for name in parts:
        load, started = os.getloadavg()[0], time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        out[name] = {**IN_PROCESS_PARTS[name](sizes), "started": started,
                     "load_average": [round(load, 1), round(os.getloadavg()[0], 1)]}
    return json_safe(out)


# -- resident memory ----------------------------------------------------------------------------


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no /proc/self/status: RSS is measured on Linux")


def rss_child(mode: str, events: int, max_reference: int) -> dict[str, Any]:
    """RSS of a file → PostgreSQL worker over one long stationary stream (this process)."""
    extra = {"weighted": False, "max_reference": max_reference} if mode == "bounded" else {}
    with tempfile.TemporaryDirectory() as tmp:
        config, values = write_stream(Path(tmp), "alpha", 7, events, 0, extra)
        path = Path(tmp) / "events.jsonl"
        path.write_bytes(b"".join(v + b"\n" for v in values))
        with sink_for("postgresql") as sink:
            source = FileSource(path)
            pipeline = Pipeline(build_monitors(read_configs([config])), source.name)
            worker = Worker(source, pipeline, sink, "file", batch_size=BATCH)
            trace: list[tuple[int, float]] = []
            worker.on_batch = lambda _: trace.append((worker.summary.events, rss_mb()))
            worker.run()
            source.close()
    step = max(1, len(trace) // 20)
    kept = trace[::step] + ([trace[-1]] if (len(trace) - 1) % step else [])
    return {"mode": mode, "events": worker.summary.events,
            "max_reference": extra.get("max_reference"), "at_events": [e for e, _ in kept],
            "rss_mb": [round(r, 1) for _, r in kept],
            "events_per_s": round(worker.summary.events / worker.summary.seconds)}


def rss_runs(sizes: Sizes) -> dict[str, Any]:
    runs = {}
    for mode in ("default", "bounded"):
        argv = [sys.executable, __file__, "--rss-child", mode, "--events", str(sizes.rss_events),
                "--max-reference", str(sizes.rss_max_reference)]
        proc = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
        runs[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    return runs


# -- the report ---------------------------------------------------------------------------------

# -- the report ---------------------------------------------------------------------------------


@contextmanager
def timed(seconds: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = round(time.perf_counter() - start, 1)


def _ratio(a: float | None, b: float | None, digits: int = 4) -> float:
    if a is None or b is None or math.isnan(a) or not b > 0:
        return math.nan
    return round(a / b, digits)


def json_safe(value: Any) -> Any:
    """``value`` with every nan or infinity replaced by None (strict JSON: the harness)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _n(value: Any, spec: str) -> str:
    """``format(value, spec)``, or "–" in the same width for a missing number."""
    if isinstance(value, int | float) and math.isfinite(value):
        return format(value, spec)
    width = re.match(r"[<>^]?\d*", spec)
    return format("–", (width.group() if width else "") or "")


def _per(value: Any) -> float:
    """µs per record of a rate per second (nan if there is none)."""
    return 1e6 / value if isinstance(value, int | float) and value > 0 else math.nan


def run(sizes: Sizes, profile_clock: str = "wall") -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = workload(Path(tmp), sizes.predictions_per_stream)
        alone = one_stream(Path(tmp) / "alone", sizes.alone_predictions)
        wide = wide_stream(Path(tmp) / "wide", sizes.alone_predictions)
        loads = {"events": work, "alone": alone, "wide": wide}
        topics = {name: (load.values, load.keys) for name, load in loads.items()}
        seconds: dict[str, float] = {}
        with timed(seconds, "broker"), broker_process(topics) as bootstrap:
            # The broker process is stopped on leaving the block, also on an error.
            with timed(seconds, "kafka"):
                kafka = kafka_comparison(bootstrap, loads, sizes.rounds)
            with timed(seconds, "profile"):
                profile = profiled_stages(bootstrap, "events", work, profile_clock)
                profile_alone = profiled_stages(bootstrap, "alone", alone, profile_clock)
                profile_rdkafka = profiled_stages(bootstrap, "events", work, profile_clock,
                                                  client="confluent")
            with timed(seconds, "checkpoints"):
                checkpoints = checkpoint_rates(bootstrap, work, sizes.checkpoints, sizes.rounds)
        with timed(seconds, "files"):
            files = file_rates(work, sizes.rounds)
    with timed(seconds, "rss"):
        rss = rss_runs(sizes)
    with timed(seconds, "calibration_costs"):
        costs = calibration_costs(sizes)
    with timed(seconds, "checkpoint_sizes"):
        checkpoint_life = checkpoint_sizes(sizes)
    raw, raw_alone, worker, solo, peer, worker_cli, solo_cli = (kafka[c] for c in (
        "raw", "raw_alone", "worker", "worker_alone", "peer", "worker_defaults",
        "worker_alone_defaults"))
    rd, rd_solo, rd_cli, rd_solo_cli = (kafka[c] for c in (
        "worker_rdkafka", "worker_alone_rdkafka", "worker_defaults_rdkafka",
        "worker_alone_defaults_rdkafka"))
    report: dict[str, Any] = {
        "records": len(work.values),
        "alone_records": len(alone.values),
        "streams": len(STREAMS),
        "batch": BATCH,
        "rounds": sizes.rounds,
        "raw_consume_per_s": raw["per_s"],
        "kafka_to_postgres_per_s": worker["per_s"],
        "one_stream_per_s": solo["per_s"],
        "river_peer_per_s": peer["per_s"],
        "raw_alone_per_s": raw_alone["per_s"],
        # Per CPU second of this process: less sensitive to other load on a shared machine (the
        # PostgreSQL server's and the broker's CPU are not counted, BLAS threads' and the
        # Kafka client's are).
        "raw_consume_cpu_per_s": raw["cpu_per_s"],
        "kafka_to_postgres_cpu_per_s": worker["cpu_per_s"],
        "one_stream_cpu_per_s": solo["cpu_per_s"],
        "river_peer_cpu_per_s": peer["cpu_per_s"],
        "raw_alone_cpu_per_s": raw_alone["cpu_per_s"],
        "kafka_over_raw": _ratio(worker["per_s"], raw["per_s"]),
        "kafka_over_raw_cpu": _ratio(worker["cpu_per_s"], raw["cpu_per_s"]),
        "one_stream_over_raw": _ratio(solo["per_s"], raw_alone["per_s"]),
        "one_stream_over_raw_cpu": _ratio(solo["cpu_per_s"], raw_alone["cpu_per_s"]),
        "peer_over_raw": _ratio(peer["per_s"], raw["per_s"]),
        "peer_over_raw_cpu": _ratio(peer["cpu_per_s"], raw["cpu_per_s"]),
        "kafka_over_peer": _ratio(worker["per_s"], peer["per_s"]),
        "kafka_over_peer_cpu": _ratio(worker["cpu_per_s"], peer["cpu_per_s"]),
        # ``monitor run`` as a user starts it: its default batch size and checkpoint interval.
        "cli_defaults": dict(zip(("batch", "checkpoint_every"), cli_defaults(), strict=True)),
        "kafka_to_postgres_cli_defaults_per_s": worker_cli["per_s"],
        "kafka_cli_defaults_over_raw": _ratio(worker_cli["per_s"], raw["per_s"]),
        "one_stream_cli_defaults_per_s": solo_cli["per_s"],
        "one_stream_cli_defaults_over_raw": _ratio(solo_cli["per_s"], raw_alone["per_s"]),
        # The same worker on librdkafka (RdKafkaSource), and its ratio to kafka-python's.
        "kafka_to_postgres_rdkafka_per_s": rd["per_s"],
        "one_stream_rdkafka_per_s": rd_solo["per_s"],
        "kafka_to_postgres_cli_defaults_rdkafka_per_s": rd_cli["per_s"],
        "one_stream_cli_defaults_rdkafka_per_s": rd_solo_cli["per_s"],
        "rdkafka_over_kafka_python": _ratio(rd["per_s"], worker["per_s"], 3),
        "rdkafka_over_kafka_python_cpu": _ratio(rd["cpu_per_s"], worker["cpu_per_s"], 3),
        "rdkafka_over_kafka_python_cli_defaults": _ratio(rd_cli["per_s"], worker_cli["per_s"], 3),
        "one_stream_rdkafka_over_kafka_python_cli_defaults": _ratio(
            rd_solo_cli["per_s"], solo_cli["per_s"], 3),
        "file_json_loads_per_s": files["json_loads"]["per_s"],
        **{f"file_to_{name}_per_s": files[name]["per_s"] for name in FILE_CASES},
        "sqlite_over_json_loads": _ratio(files["sqlite"]["per_s"], files["json_loads"]["per_s"]),
        "sqlite_over_none": _ratio(files["sqlite"]["per_s"], files["none"]["per_s"], 3),
        "postgres_over_none": _ratio(files["postgres"]["per_s"], files["none"]["per_s"], 3),
        "postgres_batch_2000_over_none": _ratio(files["postgres_batch_2000"]["per_s"],
                                                files["none"]["per_s"], 3),
        "wide_records": len(wide.values),
        "wide": {"features": WIDE[0], "calibration": WIDE[1]},
        "acceptance": acceptance(kafka),
        "calibration_costs": costs,
        "checkpoint_sizes": checkpoint_life,
        "kafka": kafka,
        "files": files,
        "profile": profile,
        "profile_alone": profile_alone,
        "profile_rdkafka": profile_rdkafka,
        "checkpoints": checkpoints,
        "rss": rss,
        "seconds": seconds,
        "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "consumer_options": dict(CONSUMER_OPTIONS),
    }
    report["goals"] = {key: {"goal": goal, "value": report[key], "met": report[key] >= goal}
                       for key, goal in GOALS.items()}
    return json_safe(report)


def _met(r: dict[str, Any], key: str) -> str:
    goal = r["goals"][key]
    return f"goal ≥ {goal['goal']:,}: {'met' if goal['met'] else 'NOT met'}"


def acceptance_lines(table: dict[str, dict[str, dict[str, Any]]]) -> Iterator[str]:
    yield ("acceptance at monitor run's defaults (worker / raw of its topic; the river peer / "
           "raw beside it):")
    yield f"  {'client':13s}{'case':48s}{'goal':>6s}{'wall':>7s}{'CPU':>7s}{'peer wall':>10s}" \
          f"{'peer CPU':>9s}  met"
    for client, cases in table.items():
        for name, c in cases.items():
            yield (f"  {client:13s}{name:48s}{c['goal']:>6}{_n(c['wall'], '>7.3f')}"
                   f"{_n(c['cpu'], '>7.3f')}{_n(c['peer_wall'], '>10.3f')}"
                   f"{_n(c['peer_cpu'], '>9.3f')}  {_met_word(c['met'])}")


def _met_word(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "NOT met"


def calibration_lines(costs: dict[str, Any]) -> Iterator[str]:
    yield (f"cost per record by calibration size m × features d ({costs['what']}; "
           f"{costs['data']}; {costs['events']:,} events per cell, batches of "
           f"{costs['batch']:,}): CPU µs per record (events/s wall)")
    cells = {(c["m"], c["d"]): c for c in costs["cells"]}
    yield f"  {'m':>6s}" + "".join(f"{f'd = {d}':>20s}" for d in FEATURE_COUNTS)
    for m in CALIBRATION_SIZES:
        yield f"  {m:>6,}" + "".join(
            f"{_n(cells[m, d]['cpu_us_per_record'], '>8.1f')} ({_n(cells[m, d]['per_s'], '>7,')})"
            f"  " for d in FEATURE_COUNTS)
    ratio = costs["ratio"]
    yield (f"  {ratio['of']}: {_n(ratio['cpu'], '.3f')} CPU, {_n(ratio['wall'], '.3f')} wall "
           f"(goal ≤ {ratio['goal']}: {'met' if ratio['met'] else 'NOT met'})")


def checkpoint_lines(sizes: dict[str, Any]) -> Iterator[str]:
    yield (f"checkpoint size over a stream's life (default configuration, "
           f"{sizes['stream']['features']} features, {sizes['stream']['calibration']:,} "
           "calibration rows, labels as events 50 late and every 10th never; bytes):")
    yield f"  {'events':>10s}{'encoded':>11s}{'row':>10s}{'pieces':>11s}{'next sends':>12s}"
    for p in sizes["points"]:
        yield (f"  {p['events']:>10,}{p['encoded_bytes']:>11,}{p['row_bytes']:>10,}"
               f"{p['pieces_bytes']:>11,}{p['sent_next_bytes']:>12,}")


def print_report(r: dict[str, Any]) -> None:
    k = r["kafka"]
    print(f"Kafka (mock broker in a child process): {r['records']:,} records of {r['streams']} "
          f"streams on topic events, {r['alone_records']:,} of one stream on topic alone; "
          f"batches of {r['batch']}; median of {r['rounds']} interleaved runs; extra consumer "
          f"options {r.get('consumer_options') or 'none'}")
    print(f"{'':44s}{'events/s':>10s}{'CPU µs/rec':>12s}{'/raw wall':>11s}{'/raw CPU':>10s}")
    cli = "batch {batch}, ckpt/{checkpoint_every}".format(**r["cli_defaults"])
    rows = [("raw kafka-python + json.loads", "raw", "raw"),
            ("raw, one-stream topic", "raw_alone", "raw_alone"),
            ("worker → PostgreSQL, 4 streams", "worker", "raw"),
            ("worker → PostgreSQL, 1 stream alone", "worker_alone", "raw_alone"),
            ("river ADWIN + PageHinkley peer, 4 streams", "peer", "raw"),
            (f"worker, run defaults ({cli}), 4 streams", "worker_defaults", "raw"),
            (f"worker, run defaults ({cli}), 1 stream", "worker_alone_defaults", "raw_alone"),
            ("librdkafka worker → PostgreSQL, 4 streams", "worker_rdkafka", "raw"),
            ("librdkafka worker, 1 stream alone", "worker_alone_rdkafka", "raw_alone"),
            ("librdkafka worker, run defaults, 4 streams", "worker_defaults_rdkafka", "raw"),
            ("librdkafka worker, run defaults, 1 stream", "worker_alone_defaults_rdkafka",
             "raw_alone"),
            ("raw, the wide topic", "raw_wide", "raw_wide"),
            ("river peer, 1 stream", "peer_alone", "raw_alone"),
            ("river peer, the wide stream", "peer_wide", "raw_wide"),
            ("worker, run defaults, the wide stream", "worker_wide_defaults", "raw_wide"),
            ("librdkafka worker, run defaults, wide", "worker_wide_defaults_rdkafka",
             "raw_wide")]
    for label, case, ref in rows:
        c, base = k[case], k[ref]
        print(f"{label:44s}{_n(c['per_s'], '>10,')}{_n(c['cpu_us_per_record'], '>12.2f')}"
              f"{_n(_ratio(c['per_s'], base['per_s'], 3), '>11.3f')}"
              f"{_n(_ratio(c['cpu_per_s'], base['cpu_per_s'], 3), '>10.3f')}")
    for label, key in (("worker / raw ", "kafka_over_raw"), ("peer / raw   ", "peer_over_raw"),
                       ("worker / peer", "kafka_over_peer")):
        goal = f"   ({_met(r, key)}, wall clock)" if key in r["goals"] else ""
        print(f"{label} : {_n(r[key], '.3f')} wall, {_n(r[key + '_cpu'], '.3f')} CPU{goal}")
    print(f"one stream    : {_n(r['one_stream_per_s'], ',')} events/s wall, "
          f"{_n(r['one_stream_cpu_per_s'], ',.0f')} per CPU s   ({_met(r, 'one_stream_per_s')})")
    print(f"librdkafka / kafka-python worker: {_n(r['rdkafka_over_kafka_python'], '.3f')} wall, "
          f"{_n(r['rdkafka_over_kafka_python_cpu'], '.3f')} CPU; at run defaults "
          f"{_n(r['rdkafka_over_kafka_python_cli_defaults'], '.3f')} (4 streams), "
          f"{_n(r['one_stream_rdkafka_over_kafka_python_cli_defaults'], '.3f')} (1 stream)")
    print(f"peer detections per run (ADWIN + PageHinkley, 4 streams): {k['peer']['detections']}")
    print("\n".join(acceptance_lines(r["acceptance"])))
    print("runs (events/s wall):", ", ".join(f"{case} {k[case]['runs_per_s']}"
                                             for case in KAFKA_CASES))

    f = r["files"]
    print(f"file ({r['records']:,} records, median of {r['rounds']}):")
    print(f"  bare json.loads loop                : {_n(f['json_loads']['per_s'], '>9,')} "
          "events/s")
    for name, label in (("none", "no storage"), ("sqlite", "SQLite"), ("postgres", "PostgreSQL"),
                        ("postgres_batch_2000", "PostgreSQL, batch 2000")):
        print(f"  FileSource → {label:23s}: {_n(f[name]['per_s'], '>9,')} events/s"
              f"   ({_n(_ratio(f[name]['per_s'], f['none']['per_s'], 2), '.2f')} × no storage, "
              f"{_n(_ratio(f[name]['per_s'], f['json_loads']['per_s'], 3), '.3f')} × json.loads)")
    print(f"  SQLite / json.loads = {_n(r['sqlite_over_json_loads'], '.3f')}   "
          f"({_met(r, 'sqlite_over_json_loads')})")

    p, q, rp = r["profile"], r["profile_alone"], r["profile_rdkafka"]
    print(f"where the worker's time goes (Kafka → PostgreSQL; cProfile, {p['clock']} clock, over "
          f"{p['records']:,} records of 4 streams | {q['records']:,} of one stream | 4 streams "
          "with librdkafka; µs per record; indented = part of the line above):")
    print(f"  {_n(p['total_us_per_record'], '8.1f')} | {_n(q['total_us_per_record'], '8.1f')}"
          f" | {_n(rp['total_us_per_record'], '8.1f')}  Worker.run under cProfile")
    print(f"  {_n(_per(r['kafka_to_postgres_per_s']), '8.1f')} | "
          f"{_n(_per(r['one_stream_per_s']), '8.1f')} | "
          f"{_n(_per(r['kafka_to_postgres_rdkafka_per_s']), '8.1f')}    the same without "
          "cProfile, wall clock (median run)")
    print(f"  {_n(k['worker']['cpu_us_per_record'], '8.1f')} | "
          f"{_n(k['worker_alone']['cpu_us_per_record'], '8.1f')} | "
          f"{_n(k['worker_rdkafka']['cpu_us_per_record'], '8.1f')}    and CPU time (median run)")
    for stage, us in p["stages_us_per_record"].items():
        print(f"  {_n(us, '8.1f')} | {_n(q['stages_us_per_record'][stage], '8.1f')} | "
              f"{_n(rp['stages_us_per_record'][stage], '8.1f')}  {stage}")

    print("checkpoint interval (Kafka → PostgreSQL, 4 streams):")
    print(f"  {'every N':>8s}{'events/s':>10s}{'CPU µs/rec':>12s}{'replay ≤ records':>18s}"
          f"{'≈ s':>7s}")
    for c in r["checkpoints"]:
        print(f"  {c['checkpoint_every']:>8d}{_n(c['per_s'], '>10,')}"
              f"{_n(c['cpu_us_per_record'], '>12.2f')}{c['replay_records_max']:>18,}"
              f"{_n(c['replay_s_at_rate'], '>7.2f')}")
    print(f"load average {r['load_average'][0]} → {r['load_average'][1]} on {r['cpus']} CPUs; "
          "seconds: " + ", ".join(f"{name} {v}" for name, v in r["seconds"].items()))
    print("\n".join(calibration_lines(r["calibration_costs"])))
    print("\n".join(checkpoint_lines(r["checkpoint_sizes"])))
    print("resident memory, file → PostgreSQL, one stream:")
    for mode, run_ in r["rss"].items():
        rss = run_["rss_mb"]
        print(f"  {mode:8s} {run_['events']:>7,} events: RSS {rss[0]:.0f} → {rss[-1]:.0f} MB "
              f"(+{rss[-1] - rss[0]:.0f} MB; {run_['events_per_s']:,} events/s)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds instead of minutes")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rounds", type=int, help="runs per case (median); default 3, quick 1")
    parser.add_argument("--checkpoints", help="checkpoint_every values, e.g. 1,5,10,50")
    parser.add_argument("--fetch-max-wait-ms", type=int,
                        help="fetch_max_wait_ms of every consumer (default: kafka-python's 500)")
    parser.add_argument("--profile-clock", choices=list(PROFILE_CLOCKS), default="wall",
                        help="cProfile's clock for the stage table (default: wall)")
    parser.add_argument("--parts", help="only the in-process parts named (comma-separated: "
                        f"{', '.join(IN_PROCESS_PARTS)}), as one JSON object")
    parser.add_argument("--rss-child", choices=["default", "bounded"], help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=FULL.rss_events, help=argparse.SUPPRESS)
    parser.add_argument("--max-reference", type=int, default=500, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        print(json.dumps(rss_child(args.rss_child, args.events, args.max_reference)))
        return 0
    sizes = QUICK if args.quick else FULL
    if args.rounds is not None:
        sizes = dataclasses.replace(sizes, rounds=args.rounds)
    if args.checkpoints:
        sizes = dataclasses.replace(
            sizes, checkpoints=tuple(int(n) for n in args.checkpoints.split(",")))
    if args.parts:
        unknown = set(args.parts.split(",")) - set(IN_PROCESS_PARTS)
        if unknown:
            parser.error(f"unknown parts {sorted(unknown)}; valid: {', '.join(IN_PROCESS_PARTS)}")
        print(json.dumps(in_process_parts(sizes, args.parts.split(",")), allow_nan=False))
        return 0
    if args.fetch_max_wait_ms is not None:
        CONSUMER_OPTIONS["fetch_max_wait_ms"] = args.fetch_max_wait_ms
    report = run(sizes, args.profile_clock)
    if args.json:
        print(json.dumps(report, allow_nan=False))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
