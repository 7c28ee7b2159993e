"""The example streams of the integration tests, their reference run and database snapshots.

Three streams built from the bundled Shuttle data (``monitor.ops.datasets.build_example``), each
with
scripted shifts, delayed labels and a low alarm threshold so that every stream raises alarms.
Their names are chosen so that murmur2 (kafka-python's and the Java client's partitioner) puts
them on three different partitions of the mock broker's 4-partition topics. Poison records of
every kind are mixed in. The reference is one uninterrupted worker over the JSONL file, stopped
before the end-of-file flush so that its detector checkpoints are comparable with a Kafka run
(a topic never ends, so a Kafka worker never flushes partial OOD windows).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from connectors import FileSource
from monitor.cli.runs import monitors_for_run
from monitor.db.engine import make_engine
from monitor.db.models import (
    AlarmRow,
    CheckpointRow,
    DeadLetterRow,
    OODFlagRow,
    OODWindowRow,
    SourceOffsetRow,
    TracePointRow,
)
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import Pipeline
from monitor.engine.worker import StopFlag, Worker
from monitor.ops.datasets import build_example
from monitor.streams.records import Alarm
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import Checkpoint

ALARM = {"rule": "shiryaev_roberts", "threshold": 100}
N_CALIBRATION = 300


@dataclass(frozen=True)
class StreamSpec:
    name: str
    partition: int  # murmur2(name) % 4, checked when the example is built
    seed: int
    phases: tuple[tuple[str, int], ...]
    label_delay: int


STREAMS = (
    StreamSpec("bikes", 1, 11, (("stable", 200), ("extreme_covariate", 150), ("concept", 250)), 20),
    StreamSpec("taxis", 2, 12, (("stable", 200), ("concept", 300)), 0),
    StreamSpec("loans", 3, 13, (("stable", 150), ("benign_covariate+concept", 250)), 5),
)

_TS = '"ts":"2026-01-01T00:00:00Z"'
#: (key, value) of records the pipeline must dead-letter, one of each kind.
POISON: tuple[tuple[str, bytes], ...] = (
    ("bikes", b"not json at all"),
    ("bikes", b'{"kind":"prediction","stream":"nobody","id":"p-1",' + _TS.encode()
     + b',"features":[1,2,3,4,5],"prediction":1.0}'),
    ("taxis", b'{"kind":"prediction","stream":"taxis","id":"p-2",' + _TS.encode()
     + b',"features":[NaN,2,3,4,5],"prediction":1.0}'),
    ("loans", b'{"kind":"prediction","stream":"loans","id":"p-3",' + _TS.encode()
     + b',"features":[1,2],"prediction":1.0}'),
    ("taxis", b'{"kind":"label","stream":"taxis","id":"p-4","label":Infinity}'),
    ("loans", b'{"kind":"prediction","stream":"loans","id":"p-5","pad":"'
     + b"x" * 300_000 + b'","features":[1,2,3,4,5],"prediction":1.0}'),
    ("bikes", b'{"kind":"prediction","stream":"bikes","id":"p-6","prediction":"high"}'),
)


@dataclass(frozen=True)
class Example:
    """The merged event sequence, as a JSONL file and as keyed Kafka records."""

    folder: Path
    configs: tuple[Path, ...]
    events: Path
    values: tuple[bytes, ...]
    keys: tuple[str, ...]

    @property
    def config_args(self) -> list[str]:
        return [arg for path in self.configs for arg in ("--config", str(path))]


#: Named features of the example streams (``build_examples(named=True)``), each in an order that
#: PostgreSQL's JSONB does not keep (it orders an object's keys by length, then bytewise):
#: alphabetical, reverse alphabetical, and mixed lengths.
FEATURE_NAMES = {
    "bikes": ("alpha", "beta", "delta", "gamma", "omega"),
    "taxis": ("zeta", "theta", "mu", "kappa", "alpha"),
    "loans": ("speed_kmh", "x", "altitude", "ab", "pressure_hpa"),
}


def build_examples(folder: Path, named: bool = False) -> Example:
    """Write the three streams and the merged events file (round-robin, poison mixed in);
    ``named``: features as objects (``FEATURE_NAMES``), in calibration and events alike."""
    from kafka.partitioner.default import DefaultPartitioner

    partitioner = DefaultPartitioner()
    lines: list[list[bytes]] = []
    configs = []
    for spec in STREAMS:
        assert partitioner(spec.name.encode(), [0, 1, 2, 3], [0, 1, 2, 3]) == spec.partition
        paths = build_example(folder, seed=spec.seed, phases=spec.phases, stream=spec.name,
                              n_calibration=N_CALIBRATION, label_delay=spec.label_delay,
                              alarm=ALARM)
        configs.append(paths["config"])
        if named:
            for key in ("calibration", "events"):
                _name_features(paths[key], FEATURE_NAMES[spec.name])
        lines.append(paths["events"].read_bytes().splitlines())
    values, keys = _merge(lines)
    events = folder / "all_events.jsonl"
    events.write_bytes(b"".join(v + b"\n" for v in values))
    return Example(folder, tuple(configs), events, tuple(values), tuple(keys))


def _name_features(path: Path, names: Sequence[str]) -> None:
    """Rewrite a JSONL file's list features as objects with ``names``, in that order."""
    rows = [json.loads(line) for line in path.read_bytes().splitlines()]
    for row in rows:
        if "features" in row:
            row["features"] = dict(zip(names, row["features"], strict=True))
    path.write_text("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows))


def _merge(lines: Sequence[Sequence[bytes]]) -> tuple[list[bytes], list[str]]:
    values: list[bytes] = []
    keys: list[str] = []
    longest = max(len(stream) for stream in lines)
    every = longest // (len(POISON) + 1)
    for i in range(longest):
        for spec, stream in zip(STREAMS, lines, strict=True):
            if i < len(stream):
                values.append(stream[i])
                keys.append(spec.name)
        if i % every == every - 1 and i // every < len(POISON):
            key, value = POISON[i // every]
            values.append(value)
            keys.append(key)
    return values, keys


# -- the reference run -------------------------------------------------------------------------


def reference_run(example: Example, url: str, batch_size: int = 50, checkpoint_every: int = 1,
                  on_alarm: Callable[[Alarm], None] | None = None) -> Snapshot:
    """One uninterrupted worker over the events file; stops when the file is read, before the
    end-of-file flush."""
    sink = DatabaseSink(url)
    source = FileSource(example.events)
    pipeline = Pipeline(build_monitors(read_configs(map(str, example.configs))), source.name)
    _run_until(source, pipeline, sink, len(example.values), batch_size=batch_size,
               checkpoint_every=checkpoint_every, on_alarm=on_alarm)
    return snapshot(url)


def run_file(events: Path, url: str, configs: Sequence[Path], upto: int,
             batch_size: int = 50) -> None:
    """A worker over ``events`` until its line ``upto`` is read (no end-of-file flush), with the
    streams ``monitor run`` takes: ``configs`` registered (or found registered as they are), or,
    without, every registered stream as stored (a restart)."""
    sink = DatabaseSink(url)
    source = FileSource(events)
    monitors, stopped = monitors_for_run([str(p) for p in configs], sink)
    _run_until(source, Pipeline(monitors, source.name, stopped=stopped), sink, upto,
               batch_size=batch_size)


def _run_until(source: FileSource, pipeline: Pipeline, sink: DatabaseSink, upto: int,
               **options: Any) -> None:
    """Run a worker until the file's line ``upto`` is read, then close the source and sink."""
    stop = StopFlag()
    worker = Worker(source, pipeline, sink, "file",
                    on_batch=lambda _: stop.set() if source.position >= upto else None, **options)
    try:
        worker.run(stop)
        assert source.position == upto
    finally:
        source.close()
        sink.close()


# -- what a database holds ---------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """Every result a database holds, in a form that compares exactly."""

    alarms: list[dict[str, Any]]
    checkpoints: dict[str, Any]
    trace_points: list[tuple[Any, ...]]
    ood_windows: list[tuple[Any, ...]]
    ood_flags: list[tuple[Any, ...]]
    dead_letters: list[tuple[Any, ...]]  # (stream, reason, payload): what, not where
    dead_letter_rows: int
    offsets: dict[tuple[str, int], int]

    @property
    def alarm_keys(self) -> list[tuple[str, str, int]]:
        return [(a["stream"], a["detector"], a["event_index"]) for a in self.alarms]

    @property
    def alarm_versions(self) -> list[str]:
        """``id:revision`` of every version of the stored alarms that the pipeline raised
        (revision 1 up to the row's, less the last when it is the attribution's, which the
        database adds: docs/explain.md), sorted: what ``on_alarm`` receives, once each."""
        return sorted(
            f"{a['id']}:{r}" for a in self.alarms
            for r in range(1, a["revision"] + 1 - ("attribution" in a["evidence"]))
        )


def snapshot(url: str) -> Snapshot:
    engine = make_engine(url)
    try:
        return _snapshot(engine)
    finally:
        engine.dispose()


def _results(conn: Any, model: Any) -> list[tuple[Any, ...]]:
    table = model.__table__
    columns = [c for c in table.columns if c.name != "created_at"]
    return [tuple(r) for r in conn.execute(select(*columns))]


def _checkpoint(engine: Engine, stream: str) -> Checkpoint:
    """The stream's stored checkpoint, with its pieces (``load_state``)."""
    from monitor.db.store import load_state

    with Session(engine) as session:
        checkpoint = load_state(session, stream)
    assert checkpoint is not None
    return checkpoint


def _snapshot(engine: Engine) -> Snapshot:
    skip = {"created_at", "acknowledged_at", "acknowledged_by"}
    with engine.connect() as conn:
        alarms = [
            {k: v for k, v in row._mapping.items() if k not in skip}
            for row in conn.execute(select(AlarmRow.__table__))
        ]
        checkpoints = {stream: canonical(_checkpoint(engine, stream).state)
                       for stream in conn.scalars(select(CheckpointRow.stream))}
        # results, without the ingest time (created_at) that differs between two runs
        traces = sorted(_results(conn, TracePointRow))
        windows = sorted(_results(conn, OODWindowRow))
        flags = sorted(tuple(r) for r in conn.execute(select(OODFlagRow.__table__)))
        letters = list(conn.execute(select(DeadLetterRow.__table__)))
        offsets = {(r.source, r.partition): r.offset
                   for r in conn.execute(select(SourceOffsetRow.__table__))}
    return Snapshot(
        alarms=sorted(alarms, key=lambda a: (a["stream"], a["detector"], a["event_index"])),
        checkpoints=checkpoints,
        trace_points=traces,
        ood_windows=windows,
        ood_flags=flags,
        dead_letters=sorted(((r.stream, r.reason, bytes(r.payload)) for r in letters), key=repr),
        dead_letter_rows=len(letters),
        offsets=offsets,
    )


def assert_same_results(got: Snapshot, want: Snapshot) -> None:
    """Every stored result equal (dead letters by content: their locations differ by source)."""
    assert got.alarm_keys == want.alarm_keys
    assert got.alarms == want.alarms
    assert sorted(got.checkpoints) == sorted(want.checkpoints)
    for stream, state in want.checkpoints.items():
        assert got.checkpoints[stream] == state, \
            f"checkpoint of {stream} differs: {differences(got.checkpoints[stream], state)}"
    assert got.trace_points == want.trace_points
    assert got.ood_windows == want.ood_windows
    assert got.ood_flags == want.ood_flags
    assert got.dead_letters == want.dead_letters
    assert got.dead_letter_rows == len(POISON)


def differences(got: Any, want: Any, path: str = "", limit: int = 5) -> list[str]:
    """Where two :func:`canonical` values differ (the first ``limit`` places), for messages."""
    if isinstance(got, dict) and isinstance(want, dict) and "mapping" in got and "mapping" in want:
        out: list[str] = []
        a, b = dict(got["mapping"]), dict(want["mapping"])
        for key in sorted(set(a) | set(b)):
            out += differences(a.get(key), b.get(key), f"{path}/{key}", limit - len(out))
            if len(out) >= limit:
                break
        return out
    if isinstance(got, tuple) and isinstance(want, tuple) and got[:1] == want[:1] == ("ndarray",):
        x, y = np.frombuffer(got[3], got[1]), np.frombuffer(want[3], want[1])
        if got[2] != want[2]:
            return [f"{path}: shape {got[2]} != {want[2]}"]
        where = np.flatnonzero(x != y)
        return [] if not where.size else [
            f"{path}: {where.size} of {x.size} differ, first at {where[0]}: {x[where[0]]!r} "
            f"!= {y[where[0]]!r}"]
    if isinstance(got, tuple) and isinstance(want, tuple) and len(got) == len(want) == 2 \
            and isinstance(got[1], list) and isinstance(want[1], list):
        if len(got[1]) != len(want[1]):
            return [f"{path}: length {len(got[1])} != {len(want[1])}"]
        out = []
        for i, (x, y) in enumerate(zip(got[1], want[1], strict=True)):
            out += differences(x, y, f"{path}[{i}]", limit - len(out))
            if len(out) >= limit:
                break
        return out
    return [] if got == want else [f"{path}: {str(got)[:120]} != {str(want)[:120]}"]


def canonical(value: Any) -> Any:
    """A detector state with arrays as bytes and floats as bit patterns: == means identical."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, Mapping):
        return {"mapping": sorted(((repr(k), canonical(v)) for k, v in value.items()), key=_first)}
    if isinstance(value, list | tuple):
        return (type(value).__name__, [canonical(v) for v in value])
    if isinstance(value, float | np.floating):
        return (type(value).__name__, struct.pack("<d", float(value)))
    if isinstance(value, np.generic):
        return (type(value).__name__, value.item())
    return value


def end_offsets(placed: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Next offset per partition after producing records placed at ``(partition, offset)``."""
    end: dict[int, int] = {}
    for partition, offset in placed:
        end[partition] = max(end.get(partition, 0), offset + 1)
    return end


def stream_partitions(
    placed: Sequence[tuple[int, int]], keys: Sequence[str]
) -> dict[str, set[int]]:
    """Partitions each key's records landed on."""
    out: dict[str, set[int]] = {}
    for (partition, _), key in zip(placed, keys, strict=True):
        out.setdefault(key, set()).add(partition)
    return out


def summary_line(snap: Snapshot) -> str:
    """A one-line description for failure messages and logs."""
    return json.dumps({"alarms": len(snap.alarms), "checkpoints": sorted(snap.checkpoints),
                       "dead_letters": snap.dead_letter_rows, "windows": len(snap.ood_windows)})


def _first(pair: tuple[str, Any]) -> str:
    return pair[0]
