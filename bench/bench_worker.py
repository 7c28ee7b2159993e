"""End-to-end throughput of the worker, where its time goes, and its memory over a long replay.

Events: four stationary streams drawn (with replacement) from the bundled Shuttle pool with their
model's predictions, keyed by stream name onto the four partitions of the mock broker's topic;
two streams carry their labels inline, two send them as separate label events 50 predictions
later. Every stream uses the default configuration (weighted conformal test martingales, kNN
covariate score, eg-BH OOD decisions) with 1 000 calibration events.

Figures (events/s in steady state: from the first batch to the last, so the 3 s group join of the
mock broker does not count; one process, on a shared machine):

``kafka_to_postgres_per_s``  ``KafkaSource`` → pipeline → ``DatabaseSink`` (PostgreSQL), batches of
                             500, offsets committed after each transaction (``monitor run``);
``raw_consume_per_s``        a bare kafka-python consumer that ``json.loads`` every value, on the
                             same topic of the same broker in the same run (``bench_kafka``);
``kafka_over_raw``           their ratio (goal 0.8: see ``profile`` for why it is far lower);
``*_cpu_per_s``, ``kafka_over_raw_cpu``  the same per CPU second of the process (steady state):
                             steadier than wall-clock rates on a shared machine;
``file_to_*_per_s``          the same events from a JSONL file into nothing, SQLite, PostgreSQL
                             (``..._checkpoint_every_10``: checkpoints and offsets every 10
                             batches, results every batch);
``postgres_over_none``       file → PostgreSQL over file → nothing (goal 0.8);
``profile``                  share of the worker's time per stage (cProfile, Kafka → PostgreSQL);
``rss``                      resident memory of a worker (file → PostgreSQL) over a long replay of
                             one stream, default configuration vs ``weighted: false`` with
                             ``max_reference`` (each in a fresh process).

Usage::

    .venv/bin/python bench/bench_worker.py            # full size (a few minutes)
    .venv/bin/python bench/bench_worker.py --quick    # seconds
    .venv/bin/python bench/bench_worker.py --json     # one JSON object (bench/harness.py)
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import platform
import pstats
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
from bench_kafka import raw_consume_rates  # noqa: E402

from connectors import FileSource, KafkaSource  # noqa: E402
from monitor.datasets import load_shuttle_regression  # noqa: E402
from monitor.pipeline import BatchOutput, Pipeline  # noqa: E402
from monitor.runner import DatabaseSink, build_monitors, read_configs  # noqa: E402
from monitor.worker import NullSink, Sink, StopFlag, Worker  # noqa: E402
from tests.kafka_harness import (  # noqa: E402
    MOCK_CONSUMER_OPTIONS,
    mock_kafka_cluster,
    produce_confluent,
)

#: Stream names whose murmur2 partitions (of 4) are 0, 1, 2, 3; label delay of each.
STREAMS: tuple[tuple[str, int], ...] = (("alpha", 0), ("bikes", 0), ("taxis", 50), ("loans", 50))
N_CALIBRATION = 1000
BATCH = 500


@dataclass(frozen=True)
class Sizes:
    predictions_per_stream: int
    rss_events: int
    repeat: int  # file runs: best of this many, interleaved (the machine is shared)
    rss_max_reference: int = 500


FULL = Sizes(predictions_per_stream=2500, rss_events=20_000, repeat=2)
QUICK = Sizes(predictions_per_stream=200, rss_events=1_500, repeat=1)


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


# -- timed runs ---------------------------------------------------------------------------------


class Meter:
    """Steady-state rate: events from the end of the first batch to the end of the last."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.marks: list[tuple[float, int]] = []
        self.cpu_marks: list[float] = []
        self.stop = StopFlag()

    def batch(self, worker: Worker) -> Callable[[BatchOutput], None]:
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

    def cpu_rate(self) -> float:
        """Events per CPU second of this process over the same steady state (the database
        server's CPU is not included); nan with fewer than 3 batches."""
        if len(self.marks) < 3:
            return math.nan
        return (self.marks[-1][1] - self.marks[0][1]) / (self.cpu_marks[-1] - self.cpu_marks[0])


def run_worker(source: Any, configs: list[str], sink: Sink, kind: str, total: int,
               profile: cProfile.Profile | None = None, batch: int = BATCH,
               cpu: list[float] | None = None, checkpoint_every: int = 1) -> float:
    """Events/s of one worker over ``total`` records (the source is closed afterwards); the
    events per CPU second are appended to ``cpu`` when given."""
    pipeline = Pipeline(build_monitors(read_configs(configs)), source.name)
    worker = Worker(source, pipeline, sink, kind, batch_size=batch,
                    checkpoint_every=checkpoint_every)
    meter = Meter(total)
    worker.on_batch = meter.batch(worker)
    start = time.perf_counter()
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
    if cpu is not None:
        cpu.append(meter.cpu_rate())
    return meter.rate(start)


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


#: File runs: name → (sink, batch size, batches per checkpoint).
FILE_CASES: dict[str, tuple[str, int, int]] = {
    "none": ("none", BATCH, 1),
    "sqlite": ("sqlite", BATCH, 1),
    "postgres": ("postgresql", BATCH, 1),
    "postgres_batch_2000": ("postgresql", 2000, 1),
    "postgres_checkpoint_every_10": ("postgresql", BATCH, 10),
}


def file_rates(work: Workload, repeat: int) -> dict[str, float]:
    """Best of ``repeat`` interleaved runs per case (the least disturbed one)."""
    best = dict.fromkeys(FILE_CASES, 0.0)
    for i in range(repeat):
        # Alternate the order, so that a load that changes during the run favours no case.
        for name in list(FILE_CASES)[:: 1 if i % 2 == 0 else -1]:
            target, batch, every = FILE_CASES[name]
            with sink_for(target) as sink:
                rate = run_worker(FileSource(work.events), work.configs, sink, "file",
                                  len(work.values), batch=batch, checkpoint_every=every)
            best[name] = max(best[name], rate)
    return best


def kafka_rates(work: Workload) -> dict[str, Any]:
    """Kafka → PostgreSQL beside the raw consumer on the same topic; then a profiled run."""
    with mock_kafka_cluster() as bootstrap:
        produce_confluent(bootstrap, "events", work.values, work.keys,
                          config={"partitioner": "murmur2_random"})  # one stream per partition

        def kafka_run(group: str, profile: cProfile.Profile | None = None,
                      cpu: list[float] | None = None) -> float:
            source = KafkaSource(bootstrap, "events", group, **MOCK_CONSUMER_OPTIONS)
            with sink_for("postgresql") as sink:
                return run_worker(source, work.configs, sink, "kafka", len(work.values), profile,
                                  cpu=cpu)

        worker_cpu: list[float] = []
        worker_rate = kafka_run("bench", cpu=worker_cpu)
        raw, raw_cpu = raw_consume_rates(bootstrap, "events", len(work.values))
        profile = cProfile.Profile()
        kafka_run("bench-profiled", profile)
    return {"worker": worker_rate, "raw": raw, "worker_cpu": worker_cpu[0], "raw_cpu": raw_cpu,
            "profile": stage_shares(profile)}


#: Stages of the worker's time: (label, file suffix, function) whose cumulative time is taken.
STAGES: tuple[tuple[str, str, str], ...] = (
    ("poll (kafka-python fetch + Record)", "connectors/kafka.py", "poll"),
    ("decode + validate (json, pydantic)", "monitor/events.py", "decode_event"),
    ("covariate kNN scores of a batch", "monitor/pipeline.py", "_prepare"),
    ("covariate monitor (CTM)", "monitor/diagnosis.py", "update_covariate"),
    ("conditional monitor (weighted CTM)", "monitor/diagnosis.py", "update_conditional"),
    ("OOD scorers + decision rule", "monitor/decisions/decider.py", "add"),
    ("detector state_dict", "monitor/stream.py", "state_dict"),
    ("persist (encode + one transaction)", "monitor/runner.py", "persist"),
    ("commit offsets to Kafka", "connectors/kafka.py", "commit"),
)


def stage_shares(profile: cProfile.Profile) -> dict[str, float]:
    """Fraction of ``Worker.run``'s time spent in each stage (stages do not overlap); the
    first batch (group join, first fetch) is not profiled."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    cumulative: dict[tuple[str, str], float] = {}
    for (filename, _, function), (_, _, _, cum, _) in stats.items():
        key = (filename.replace("\\", "/"), function)
        cumulative[key] = max(cumulative.get(key, 0.0), cum)

    def cum_of(suffix: str, function: str) -> float:
        return max((t for (f, fn), t in cumulative.items()
                    if f.endswith(suffix) and fn == function), default=0.0)

    total = cum_of("monitor/worker.py", "run")
    shares = {label: round(cum_of(suffix, fn) / total, 3) for label, suffix, fn in STAGES}
    shares["other (routing, join, records, loop)"] = round(1 - sum(shares.values()), 3)
    return shares


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


def run(sizes: Sizes) -> dict[str, Any]:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        work = workload(Path(tmp), sizes.predictions_per_stream)
        kafka = kafka_rates(work)
        files = file_rates(work, sizes.repeat)
    return {
        "records": len(work.values),
        "streams": len(STREAMS),
        "batch": BATCH,
        "kafka_to_postgres_per_s": round(kafka["worker"]),
        "raw_consume_per_s": round(kafka["raw"]),
        "kafka_over_raw": round(kafka["worker"] / kafka["raw"], 4),
        # Per CPU second of the process: less sensitive to other load on a shared machine (the
        # PostgreSQL server's CPU is not counted, the BLAS threads' and the client's are).
        "kafka_to_postgres_cpu_per_s": round(kafka["worker_cpu"]),
        "raw_consume_cpu_per_s": round(kafka["raw_cpu"]),
        "kafka_over_raw_cpu": round(kafka["worker_cpu"] / kafka["raw_cpu"], 4),
        **{f"file_to_{name}_per_s": round(rate) for name, rate in files.items()},
        "postgres_over_none": round(files["postgres"] / files["none"], 3),
        "sqlite_over_none": round(files["sqlite"] / files["none"], 3),
        "postgres_batch_2000_over_none": round(files["postgres_batch_2000"] / files["none"], 3),
        "postgres_checkpoint_every_10_over_none": round(
            files["postgres_checkpoint_every_10"] / files["none"], 3
        ),
        "profile": kafka["profile"],
        "rss": rss_runs(sizes),
        "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def print_report(r: dict[str, Any]) -> None:
    print(f"{r['records']} records, {r['streams']} streams, batches of {r['batch']}")
    print(f"Kafka → worker → PostgreSQL  : {r['kafka_to_postgres_per_s']:>9,} events/s")
    print(f"raw kafka-python + json.loads: {r['raw_consume_per_s']:>9,} events/s"
          f"   (worker / raw = {r['kafka_over_raw']:.3f})")
    print(f"  per CPU second of the process: worker {r['kafka_to_postgres_cpu_per_s']:,}, raw "
          f"{r['raw_consume_cpu_per_s']:,} events (worker / raw = {r['kafka_over_raw_cpu']:.3f})")
    print(f"file → no storage            : {r['file_to_none_per_s']:>9,} events/s")
    print(f"file → SQLite                : {r['file_to_sqlite_per_s']:>9,} events/s"
          f"   ({r['sqlite_over_none']:.2f} × no storage)")
    print(f"file → PostgreSQL            : {r['file_to_postgres_per_s']:>9,} events/s"
          f"   ({r['postgres_over_none']:.2f} × no storage)")
    print(f"file → PostgreSQL, batch 2000: {r['file_to_postgres_batch_2000_per_s']:>9,} events/s"
          f"   ({r['postgres_batch_2000_over_none']:.2f} × no storage)")
    print(f"file → PostgreSQL, ckpt / 10 : "
          f"{r['file_to_postgres_checkpoint_every_10_per_s']:>9,} events/s"
          f"   ({r['postgres_checkpoint_every_10_over_none']:.2f} × no storage)")
    print("where the worker's time goes (Kafka → PostgreSQL, cProfile):")
    for stage, share in r["profile"].items():
        print(f"  {share:6.1%}  {stage}")
    print(f"load average {r['load_average'][0]} → {r['load_average'][1]} on {r['cpus']} CPUs")
    print("resident memory, file → PostgreSQL, one stream:")
    for mode, run_ in r["rss"].items():
        rss = run_["rss_mb"]
        print(f"  {mode:8s} {run_['events']:>7,} events: RSS {rss[0]:.0f} → {rss[-1]:.0f} MB "
              f"(+{rss[-1] - rss[0]:.0f} MB; {run_['events_per_s']:,} events/s)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="seconds instead of minutes")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rss-child", choices=["default", "bounded"], help=argparse.SUPPRESS)
    parser.add_argument("--events", type=int, default=FULL.rss_events, help=argparse.SUPPRESS)
    parser.add_argument("--max-reference", type=int, default=500, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        print(json.dumps(rss_child(args.rss_child, args.events, args.max_reference)))
        return 0
    report = run(QUICK if args.quick else FULL)
    if args.json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
