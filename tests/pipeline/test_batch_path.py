"""The batch path equals the per-event reference path, bit for bit (issue #13).

``Pipeline.process`` decodes a poll batch at once, routes it by stream and advances each stream's
monitors over its share in one call per monitor; ``PerEventPipeline`` (``tests/support/oracle.py``)
decodes and observes each record on its own, as the worker did before. Every result — alarms (ids,
indexes, statistics, changepoints, kinds, evidence), trace points, OOD windows, performance windows,
the alarms' later evidence (feature attributions), dead letters and the streams' checkpointed states
— must be the same for batches of 1, 37 and 5 000, on streams with interleaved and delayed labels,
bad records and alarms in the middle of a batch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from monitor.engine.pipeline import Pipeline
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs
from tests.support.pipeline_runs import assert_same, interleaved, run
from tests.support.streams import canonical

ALARM = {"rule": "shiryaev_roberts", "threshold": 100}










@pytest.fixture(scope="module")
def merged(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[bytes]]:
    """Three streams (labels inline, 5 and 20 events late), alarms of every kind, poison."""
    return interleaved(tmp_path_factory.mktemp("batch_path"), alarm=ALARM)


@pytest.mark.parametrize("batch", [1, 37, 5000])
def test_batch_path_equals_the_per_event_path(
    merged: tuple[list[Path], list[bytes]], batch: int
) -> None:
    configs, values = merged
    reference = run(configs, values, 500, per_event=True)
    assert len(reference["alarms"]) >= 5, "the example should raise alarms of every detector"
    assert {a["detector"] for a in reference["alarms"]} == {"covariate", "conditional"}
    assert reference["dead"] and reference["windows"]
    assert reference["performance"] and reference["evidence"]
    assert any("density_ratio_directions" in a["evidence"] for a in reference["alarms"])
    assert_same(run(configs, values, batch, per_event=False), reference)


def test_the_demo_stream(tmp_path: Path) -> None:
    """The demo's four phases (stable, benign covariate, concept, extreme covariate)."""
    paths = build_example(tmp_path, seed=0, label_delay=0)
    values = paths["events"].read_bytes().splitlines()
    reference = run([paths["config"]], values, 500, per_event=True)
    kinds = {a["kind"] for a in reference["alarms"]}
    assert {"concept_shift", "extreme_covariate_shift"} <= kinds
    for batch in (37, 5000):
        assert_same(run([paths["config"]], values, batch, per_event=False), reference)


def test_duplicates_and_early_labels_in_one_batch(tmp_path: Path) -> None:
    """A label before its prediction, a duplicate prediction id while the first waits, and a
    stream's events rejected mid-batch: the same dead letters and joins as one by one."""
    paths = build_example(tmp_path, seed=5, n_calibration=200, label_delay=3,
                          phases=[("stable", 120)], alarm=ALARM)
    lines = paths["events"].read_bytes().splitlines()
    early = [line for line in lines if b'"kind":"label"' in line.replace(b" ", b"")][:5]
    predictions = [line for line in lines if line not in early]
    values = early + predictions[:10] + predictions[5:8] + predictions[10:]
    reference = run([paths["config"]], values, 500, per_event=True)
    assert any("duplicate prediction id" in d for d in reference["dead"])
    for batch in (1, 7, 5000):
        assert_same(run([paths["config"]], values, batch, per_event=False), reference)


def test_a_failing_batch_step_costs_one_record(tmp_path: Path, monkeypatch: Any) -> None:
    """A stream's batch step that fails on something other than the data (a bug) does not stop
    the worker: it reloads the last checkpoint and processes the records one at a time, where
    the failing record becomes an ``internal error`` dead letter and every other one is
    processed, with the results of a run that never saw it."""
    from connectors import FileSource
    from monitor.db.sink import DatabaseSink
    from monitor.engine.worker import Worker
    from monitor.streams.monitor import StreamMonitor

    paths = build_example(tmp_path, seed=2, n_calibration=150, phases=[("stable", 200)])
    lines = paths["events"].read_bytes().splitlines()
    poisoned = 77
    original = StreamMonitor._advance

    def failing(self: StreamMonitor, batch: Any) -> None:
        if f"e-{poisoned:06d}" in batch.cov_ids:
            raise RuntimeError("boom")
        original(self, batch)

    def run_file(path: Path, db: str) -> tuple[Any, Any]:
        source = FileSource(path)
        sink = DatabaseSink(f"sqlite:///{tmp_path / db}")
        pipeline = Pipeline(build_monitors(read_configs([str(paths["config"])])), source.name)
        worker = Worker(source, pipeline, sink, "file", batch_size=50)
        try:
            return worker.run(), pipeline.streams["shuttle"].state_dict()
        finally:
            source.close()
            sink.close()

    monkeypatch.setattr(StreamMonitor, "_advance", failing)
    summary, state = run_file(paths["events"], "failing.db")
    assert summary.events == len(lines) - 1
    assert summary.dead_letters == 1
    monkeypatch.setattr(StreamMonitor, "_advance", original)
    skipped = tmp_path / "skipped.jsonl"
    skipped.write_bytes(b"".join(v + b"\n" for i, v in enumerate(lines) if i != poisoned))
    _, want = run_file(skipped, "skipped.db")
    assert canonical(state) == canonical(want)


def test_a_tombstone_is_a_dead_letter_on_both_paths(tmp_path: Path) -> None:
    """A Kafka record without a value (a tombstone) is a dead letter with a plain reason."""
    from monitor.streams.events import NO_VALUE

    paths = build_example(tmp_path, seed=1, n_calibration=100, phases=[("stable", 30)])
    values: list[Any] = paths["events"].read_bytes().splitlines()
    values.insert(10, None)
    reference = run([paths["config"]], values, 500, per_event=True)
    assert len(reference["dead"]) == 1 and NO_VALUE in reference["dead"][0]
    assert_same(run([paths["config"]], values, 7, per_event=False), reference)


def _with_scale(line: bytes, keep: bool = True) -> bytes:
    """A prediction line with a deterministic predicted scale (labels unchanged)."""
    event = json.loads(line)
    if event["kind"] == "prediction" and keep:
        event["scale"] = 0.25 + abs(event["features"][0]) / 4
    return json.dumps(event).encode()


def test_normalized_residual_is_the_same_on_both_paths(tmp_path: Path) -> None:
    """``score: normalized_residual``: the scale travels with each prediction through the
    delayed-label join (and the checkpointed state), both paths give the same results, and a
    prediction without ``scale`` is the same dead letter on both."""
    paths = build_example(tmp_path, seed=4, n_calibration=150, label_delay=5,
                          phases=[("stable", 100), ("concept", 120)], alarm=ALARM)
    cal = paths["calibration"]
    cal.write_bytes(b"".join(_with_scale(v) + b"\n" for v in cal.read_bytes().splitlines()))
    config = paths["config"]
    config.write_text(config.read_text().replace("score: abs_residual",
                                                 "score: normalized_residual"))
    lines = paths["events"].read_bytes().splitlines()
    unscaled = lines.index(next(v for v in lines[40:] if b'"prediction"' in v))
    values = [_with_scale(v, keep=i != unscaled) for i, v in enumerate(lines)]
    monitors = build_monitors(read_configs([str(config)]))
    assert monitors["shuttle"].calibration.scales is not None
    reference = run([config], values, 500, per_event=True, flush=False)
    assert sum("'scale' is missing" in d for d in reference["dead"]) == 1
    assert any(a["detector"] == "conditional" for a in reference["alarms"])
    for batch in (1, 37, 5000):
        assert_same(run([config], values, batch, per_event=False, flush=False), reference)
