"""Runs of the pipeline over interleaved example streams, every output and state gathered for
comparison: the batch path against the per-event reference path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monitor.engine.pipeline import Pipeline, RawRecord
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs
from tests.support.oracle import PerEventPipeline
from tests.support.streams import POISON, STREAMS, canonical


def run(configs: Sequence[Path], values: Sequence[bytes], batch: int, per_event: bool,
        flush: bool = True) -> dict[str, Any]:
    """Every output of one pipeline over ``values`` in batches of ``batch``, and its states."""
    monitors = build_monitors(read_configs(map(str, configs)))
    pipeline = (PerEventPipeline if per_event else Pipeline)(monitors, "file:events")
    records = [RawRecord("events", 0, i, v, timestamp_ms=1_700_000_000_000 + i)
               for i, v in enumerate(values)]
    got: dict[str, Any] = {"alarms": [], "traces": [], "windows": [], "dead": [],
                                 "events": [], "offsets": [], "performance": [], "evidence": []}
    outs = [pipeline.process(records[i : i + batch]) for i in range(0, len(records), batch)]
    if flush:
        outs.append(pipeline.flush())
    alarms, traces, windows = [], [], []
    for out in outs:
        alarms += out.alarms
        traces += out.trace_points
        windows += out.ood_windows
        got["performance"] += [repr(w) for w in out.performance_windows]
        got["evidence"] += [e.to_json() for e in out.alarm_evidence]
        got["dead"] += [repr(d) for d in out.dead_letters]
        got["events"].append(out.events)
        got["offsets"].append(sorted(out.offsets.items()))
    # Within a batch the streams' records follow each other in no fixed order (the per-event
    # path drains them from a set); each stream's own records keep their order.
    got["alarms"] = [a.to_json() for a in by_stream(alarms)]
    got["traces"] = [repr(t) for t in by_stream(traces)]  # repr: nan == nan, exact floats
    got["windows"] = [repr(w) for w in by_stream(windows)]
    got["states"] = {name: canonical(m.state_dict()) for name, m in pipeline.streams.items()}
    return got


def by_stream(records: Sequence[Any]) -> list[Any]:
    return sorted(records, key=lambda r: r.stream)  # stable: the order within a stream stays


def assert_same(batch: dict[str, Any], reference: dict[str, Any]) -> None:
    assert batch["alarms"] == reference["alarms"]
    assert batch["traces"] == reference["traces"]
    assert batch["windows"] == reference["windows"]
    assert sorted(batch["performance"]) == sorted(reference["performance"])
    assert sorted(map(repr, batch["evidence"])) == sorted(map(repr, reference["evidence"]))
    assert batch["dead"] == reference["dead"]
    assert sum(batch["events"]) == sum(reference["events"])
    for name, state in reference["states"].items():
        assert batch["states"][name] == state, f"state of {name} differs"


def interleaved(folder: Path, **example: Any) -> tuple[list[Path], list[bytes]]:
    """The example streams of STREAMS (labels inline, 5 and 20 events late) built with
    ``example`` options, their records interleaved, with a poison record every 97 lines."""
    configs, lines = [], []
    for spec in STREAMS:
        paths = build_example(folder, seed=spec.seed, phases=spec.phases, stream=spec.name,
                              n_calibration=300, label_delay=spec.label_delay, **example)
        configs.append(paths["config"])
        lines.append(paths["events"].read_bytes().splitlines())
    values: list[bytes] = []
    for i in range(max(map(len, lines))):
        values += [stream[i] for stream in lines if i < len(stream)]
        if i % 97 == 96:
            values.append(POISON[(i // 97) % len(POISON)][1])
    return configs, values
