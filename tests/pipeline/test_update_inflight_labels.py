"""Labels in flight across a configuration update that changes the stream's features.

The defect: a label that arrives after an update to a version with other features, for a
prediction made before the update, joined with the prediction's old-width features; the new
version's detectors raised ``ValueError`` and the record became an ``internal error`` dead
letter. Now the update marks the predictions still waiting for their label in the label store
(the version they were made under), and such a label is a dead letter with a reason that says
so, on the per-event path and the batch path alike, across checkpoints; it changes nothing (as
every dead letter), so a replay gives the same dead letter. When the features did not change,
those labels join and count as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.engine.pipeline import Pipeline, RawRecord
from monitor.ops.datasets import build_example
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.join import LabelJoin, Pending
from monitor.streams.monitor import StreamMonitor
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import decode_state, encode_state
from tests.support.oracle import PerEventPipeline
from tests.support.revision_example import run_worker_with_update
from tests.support.streams import canonical

DELAY = 10  # labels arrive DELAY predictions after theirs: DELAY of them in flight at the cut
CUT = 120  # predictions made under version 1


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[StreamConfig, list[bytes]]:
    folder = tmp_path_factory.mktemp("inflight")
    paths = build_example(folder, seed=5, phases=(("stable", 150), ("concept", 150)),
                          n_calibration=300, label_delay=DELAY,
                          alarm={"rule": "shiryaev_roberts", "threshold": 50})
    config = yaml.safe_load(paths["config"].read_text())
    paths["config"].write_text(yaml.safe_dump(config))
    return read_configs([str(paths["config"])])[0], paths["events"].read_bytes().splitlines()


def _cut(values: list[bytes]) -> int:
    """The position right after the CUT-th prediction."""
    seen = 0
    for k, value in enumerate(values):
        seen += json.loads(value)["kind"] == "prediction"
        if seen == CUT:
            return k + 1
    raise AssertionError("too few predictions")


def _version2(config: StreamConfig, drop_feature: bool) -> tuple[StreamConfig, Calibration]:
    """Another alarm rule and, with ``drop_feature``, a calibration without the last feature."""
    changed = StreamConfig.model_validate({
        **config.model_dump(mode="json"), "alarm": {"rule": "shiryaev_roberts", "threshold": 1e4},
    })
    rows = Calibration.from_rows(
        json.loads(line) for line in Path(config.calibration).read_text().splitlines()
    ).to_rows()
    if drop_feature:
        rows = [{**row, "features": row["features"][:-1]} for row in rows]
    return changed, Calibration.from_rows(rows)


def _after(values: list[bytes], drop_feature: bool) -> list[bytes]:
    """The events after the cut as the producer sends them under version 2: predictions with
    version 2's features; labels as they are (among them those of version 1's predictions)."""
    out = []
    for value in values:
        event = json.loads(value)
        if drop_feature and event["kind"] == "prediction":
            event["features"] = event["features"][:-1]
        out.append(json.dumps(event).encode())
    return out


def _records(values: list[bytes], start: int) -> list[RawRecord]:
    return [RawRecord("events", 0, start + i, v, timestamp_ms=1_700_000_000_000 + start + i)
            for i, v in enumerate(values)]


def _process(pipeline: Pipeline, records: list[RawRecord], batch: int, got: dict[str, Any]
             ) -> None:
    for i in range(0, len(records), batch):
        out = pipeline.process(records[i : i + batch])
        got["alarms"] += [a.to_json() for a in out.alarms]
        got["traces"] += [repr(t) for t in out.trace_points]
        got["performance"] += [repr(w) for w in out.performance_windows]
        got["dead"] += [repr(d) for d in out.dead_letters]
        got["reasons"] += [d.reason for d in out.dead_letters]
        got["events"] += out.events


def _version1(config: StreamConfig, values: list[bytes], batch: int, per_event: bool = False
              ) -> tuple[int, Pipeline, dict[str, Any]]:
    """Version 1's pipeline after the records up to the cut: ``(cut, pipeline, results)``."""
    cut = _cut(values)
    pipeline = (PerEventPipeline if per_event else Pipeline)(build_monitors([config]),
                                                             "file:events")
    got: dict[str, Any] = {"alarms": [], "traces": [], "performance": [], "dead": [],
                           "reasons": [], "events": 0}
    _process(pipeline, _records(values[:cut], 0), batch, got)
    return cut, pipeline, got


def _update(pipeline: Pipeline, config: StreamConfig, drop_feature: bool,
            checkpoint: bool) -> StreamMonitor:
    """What the worker's refresh does: version 2 takes over from version 1's state
    (``checkpoint``: from that state encoded as a checkpoint, as a restart does)."""
    state = pipeline.streams[config.name].state_dict()
    if checkpoint:
        state = decode_state(*encode_state(state))
    changed, calibration = _version2(config, drop_feature)
    second = StreamMonitor(changed, calibration, config_version=2)
    second.load_state(state)
    pipeline.streams[config.name] = second
    return second


def _run(config: StreamConfig, values: list[bytes], drop_feature: bool, batch: int,
         per_event: bool, checkpoint: bool = False, restart_at: int | None = None
         ) -> dict[str, Any]:
    """Version 1 up to the cut, version 2 after it; ``restart_at``: a restart from a
    checkpoint that many records after the cut."""
    cut, pipeline, got = _version1(config, values, batch, per_event)
    got["in_flight"] = sorted(pipeline.streams[config.name].join.predictions)
    _update(pipeline, config, drop_feature, checkpoint)
    rest = _records(_after(values[cut:], drop_feature), cut)
    stop = len(rest) if restart_at is None else restart_at
    _process(pipeline, rest[:stop], batch, got)
    if restart_at is not None:
        monitor = pipeline.streams[config.name]
        changed, calibration = _version2(config, drop_feature)
        resumed = StreamMonitor(changed, calibration, config_version=2)
        resumed.load_state(decode_state(*encode_state(monitor.state_dict())))
        pipeline.streams[config.name] = resumed
        _process(pipeline, rest[stop:], batch, got)
    monitor = pipeline.streams[config.name]
    got["state"] = canonical(monitor.state_dict())
    got["labeled"] = monitor.labeled
    got["join"] = monitor.join.state_dict()
    got["waiting"] = sorted(monitor.join.predictions)
    return got


def _reason(event_id: str) -> str:
    return (f"label of prediction {event_id!r} made under configuration version 1, whose "
            "features (x0, x1, x2, x3, x4) the version 2 detectors (x0, x1, x2, x3) cannot use")


def test_labels_of_old_predictions_are_dead_letters_with_their_reason(
    example: tuple[StreamConfig, list[bytes]]
) -> None:
    config, values = example
    got = _run(config, values, drop_feature=True, batch=1, per_event=True)
    in_flight = got["in_flight"]
    cut = _cut(values)
    events = [json.loads(v) for v in values]
    labeled_before = {e["id"] for e in events[:cut] if e["kind"] == "label"}
    assert in_flight == sorted(e["id"] for e in events[:cut] if e["kind"] == "prediction"
                               and e["id"] not in labeled_before)
    assert len(in_flight) >= DELAY
    # Each in-flight label is a dead letter naming its prediction and why; nothing else is.
    assert not any(r.startswith("internal error") for r in got["reasons"])
    assert sorted(got["reasons"]) == sorted(_reason(i) for i in in_flight)
    # Version 2's own predictions and labels are monitored: every later label joined.
    n_labels = sum(e["kind"] == "label" for e in events)
    assert got["labeled"] == n_labels - len(in_flight)
    assert any(a["evidence"]["config_version"] == 2 for a in got["alarms"])
    # A dead letter changes nothing: the old predictions still wait, until the join expires
    # them (counted as expired, never silently).
    assert got["waiting"] == in_flight


@pytest.mark.parametrize("drop_feature", [True, False])
def test_per_event_batches_and_checkpoints_agree(
    example: tuple[StreamConfig, list[bytes]], drop_feature: bool
) -> None:
    config, values = example
    reference = _run(config, values, drop_feature, batch=1, per_event=True)
    for batch, per_event, checkpoint, restart_at in (
        (37, True, False, None), (1, False, False, None), (37, False, True, None),
        (5000, False, False, None), (13, False, False, 5), (13, True, True, 5),
    ):
        got = _run(config, values, drop_feature, batch, per_event, checkpoint, restart_at)
        for key in ("alarms", "performance", "dead", "events", "state", "labeled", "waiting"):
            assert got[key] == reference[key], (key, batch, per_event, checkpoint, restart_at)
        if restart_at is None:
            assert got["traces"] == reference["traces"]


def test_with_the_same_features_their_labels_join_as_before(
    example: tuple[StreamConfig, list[bytes]]
) -> None:
    config, values = example
    got = _run(config, values, drop_feature=False, batch=37, per_event=False)
    n_labels = sum(json.loads(v)["kind"] == "label" for v in values)
    assert got["dead"] == [] and got["in_flight"]
    assert got["labeled"] == n_labels  # version 1's in-flight labels included


@pytest.mark.parametrize("back", [False, True])
def test_a_second_update_keeps_the_version_they_were_made_under(
    example: tuple[StreamConfig, list[bytes]], back: bool
) -> None:
    """v1 → v2 (other features) → v3 with v2's features: a label of a v1 prediction still names
    version 1, a label of a v2 prediction in flight at the second update joins; ``back``: v3
    with v1's features, the other way round."""
    config, values = example
    cut, pipeline, got = _version1(config, values, batch=50)
    v1 = sorted(pipeline.streams[config.name].join.predictions)
    _update(pipeline, config, drop_feature=True, checkpoint=False)
    # Version 2's first three predictions, no label: then version 3.
    rest = _after(values[cut:], drop_feature=True)
    head = [v for v in rest if json.loads(v)["kind"] == "prediction"][:3]
    _process(pipeline, _records(head, cut), 50, got)
    v2 = [json.loads(v)["id"] for v in head]
    state = decode_state(*encode_state(pipeline.streams[config.name].state_dict()))
    changed, calibration = _version2(config, drop_feature=not back)
    third = StreamMonitor(changed, calibration, config_version=3)
    third.load_state(state)
    pipeline.streams[config.name] = third
    labeled = third.labeled
    labels = [json.dumps({"kind": "label", "stream": config.name, "id": i, "label": 0}).encode()
              for i in v1 + v2]
    _process(pipeline, _records(labels, 10_000), 50, got)
    five, four = "x0, x1, x2, x3, x4", "x0, x1, x2, x3"
    assert got["reasons"] == [
        f"label of prediction {i!r} made under configuration version 2, whose features "
        f"({four}) the version 3 detectors ({five}) cannot use" for i in v2
    ] if back else [
        f"label of prediction {i!r} made under configuration version 1, whose features "
        f"({five}) the version 3 detectors ({four}) cannot use" for i in v1
    ]
    assert third.labeled == labeled + len(v1 if back else v2)


def test_the_mark_survives_the_label_store_state() -> None:
    """The mark is part of the label store's checkpointed state; a state written before the
    mark existed loads with none."""
    join = LabelJoin()
    join.add_prediction(Pending("a", 0, 0.0, (1.0, 2.0), 0.5))
    join.add_prediction(Pending("b", 1, 1.0, (1.0, 2.0), 0.5, 0.25))
    assert join.mark_made_under(1, ("x0", "x1")) == 2
    join.add_prediction(Pending("c", 2, 2.0, (1.0,), 0.5))
    assert join.mark_made_under(2, ("x0",)) == 1  # a and b keep version 1
    state = join.state_dict()
    again = LabelJoin()
    again.load_state(json.loads(json.dumps(state)))
    assert again.state_dict() == state
    assert [(again.made_under(i)) for i in "abc"] == [
        (1, ("x0", "x1")), (1, ("x0", "x1")), (2, ("x0",))
    ]
    assert again._predictions["b"].scale == 0.25
    # written before the mark: rows of five or six items, no "made_under"
    old = {**state, "predictions": [row[:6] if row[0] == "b" else row[:5]
                                    for row in state["predictions"]]}
    old.pop("made_under")
    before = LabelJoin()
    before.load_state(old)
    assert [before.made_under(i) for i in "abc"] == [None, None, None]
    assert before._predictions["b"].scale == 0.25


def test_a_worker_stores_them_as_dead_letters(
    example: tuple[StreamConfig, list[bytes]], empty_database_url: str
) -> None:
    """End to end: a worker picks up version 2 (other features) right after version 1's last
    prediction; the labels in flight are stored as dead letters with their reason (before: an
    ``internal error`` each) and the stream goes on under version 2, as through the pipeline
    alone."""
    from sqlalchemy import select

    from monitor.db.engine import make_engine
    from monitor.db.models import DeadLetterRow

    config, values = example
    cut = _cut(values)
    expected = _run(config, values, drop_feature=True, batch=cut, per_event=False)
    monitor = run_worker_with_update(
        config, values[:cut] + _after(values[cut:], drop_feature=True), empty_database_url,
        batch_size=cut, update_after=1, version2=_version2(config, drop_feature=True),
    )
    assert monitor.config_version == 2
    # the same label store and counts as the pipeline without the worker (which also flushed
    # the last OOD window at the end of its finite source)
    assert canonical(monitor.join.state_dict()) == canonical(expected["join"])
    assert monitor.labeled == expected["labeled"]
    engine = make_engine(empty_database_url)
    try:
        with engine.connect() as connection:
            stored = connection.execute(
                select(DeadLetterRow.reason, DeadLetterRow.stream).order_by(DeadLetterRow.offset)
            ).all()
    finally:
        engine.dispose()
    assert [row.reason for row in stored] == expected["reasons"]
    assert sorted(row.reason for row in stored) == sorted(_reason(i) for i in expected["in_flight"])
    assert {row.stream for row in stored} == {config.name}


@pytest.mark.parametrize("drop_feature", [True, False])
def test_a_state_without_feature_names_compares_their_number(
    example: tuple[StreamConfig, list[bytes]], drop_feature: bool
) -> None:
    """A checkpoint written before the state named its features (no ``attribution``): the
    labels are refused when the number of features changed, and join when it did not."""
    config, values = example
    cut, pipeline, got = _version1(config, values, batch=50)
    first = pipeline.streams[config.name]
    in_flight = sorted(first.join.predictions)
    state = first.state_dict()
    del state["attribution"], state["performance"], state["attributed"]
    changed, calibration = _version2(config, drop_feature)
    second = StreamMonitor(changed, calibration, config_version=2)
    second.load_state(decode_state(*encode_state(state)))
    pipeline.streams[config.name] = second
    labeled = second.labeled
    _process(pipeline, _records(_after(values[cut:], drop_feature), cut), 50, got)
    refused = [] if not drop_feature else [
        f"label of prediction {i!r} made under configuration version 1, whose features (5 "
        "values) the version 2 detectors (x0, x1, x2, x3) cannot use" for i in in_flight
    ]
    assert sorted(got["reasons"]) == refused
    n_labels = sum(json.loads(v)["kind"] == "label" for v in values[cut:])
    assert second.labeled == labeled + n_labels - len(refused)
