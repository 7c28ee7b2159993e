"""A configuration update keeps what its alarms still wait for (the defect: "a configuration
update drops pending revisions").

When a stream gets a new configuration version, its detectors restart from the new calibration
(docs/operations.md). Before, the alarms still waiting as ``insufficient_evidence`` and the open
feature-attribution windows were dropped with the old detectors: those alarms were never
revised nor attributed. Now the old version's detectors are kept, for the support flags only,
until their pending alarms are revised, and the open windows complete against the old
calibration; with other features, where neither is possible, each such alarm is closed with an
explicit outcome. Same results per event and in batches, and across a checkpoint.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.events import decode_event
from monitor.streams.monitor import StreamMonitor
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import decode_state, encode_state
from tests.support.oracle import PerEventStream
from tests.support.revision_example import WINDOW, revision_example, run_worker_with_update
from tests.support.streams import canonical

TS = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[StreamConfig, list[bytes]]:
    """When the extreme shift starts (event 150) a conditional alarm and then a covariate
    alarm are raised with fewer than MIN_EVENTS events of evidence, and revised later."""
    config, lines = revision_example(tmp_path_factory.mktemp("update_pending"))
    return read_configs([str(config)])[0], lines


def _monitor(config: StreamConfig) -> StreamMonitor:
    return build_monitors([config])[config.name]


def _feed(monitor: StreamMonitor, values: list[bytes], batch: int | None
          ) -> dict[str, list[dict[str, Any]]]:
    """Alarms and late evidence of ``values`` in batches (``None``: one at a time)."""
    events = [decode_event(v) for v in values]
    per_event = PerEventStream(monitor)
    alarms, evidence = [], []
    for start in range(0, len(events), batch or len(events)):
        chunk = events[start : start + (batch or len(events))]
        if batch is None:
            for event in chunk:
                per_event.observe(event, TS)
        else:
            monitor.step(chunk, lambda k: TS)
        alarms += [a.to_json() for a in monitor.drain()[0]]
        evidence += [e.to_json() for e in monitor.drain_explanations()[1]]
    return {"alarms": alarms, "evidence": evidence}


def _cut(config: StreamConfig, values: list[bytes]) -> tuple[int, dict[str, Any]]:
    """Where to update: right after the prediction that raised the covariate alarm with too
    little evidence, the conditional alarm raised before it still waiting too."""
    reference = _feed(_monitor(config), values, 500)["alarms"]
    pending = next(a for a in reference
                   if a["detector"] == "covariate" and a["kind"] == "insufficient_evidence")
    cut = 1 + next(k for k, v in enumerate(values)
                   if pending["event_id"].encode() in v and b'"kind":"prediction"' in v)
    return cut, pending


def _changed(config: StreamConfig, drop_feature: bool = False
             ) -> tuple[StreamConfig, Calibration]:
    """Version 2: another conditional rule and another calibration (its last 200 rows), so a
    window completed against it would differ; ``drop_feature``: without the last feature."""
    changed = StreamConfig.model_validate({
        **config.model_dump(mode="json"), "alarm": {"rule": "shiryaev_roberts", "threshold": 1e6},
    })
    rows = Calibration.from_rows(
        json.loads(line) for line in Path(config.calibration).read_text().splitlines()
    ).to_rows()[100:]
    if drop_feature:
        rows = [{**row, "features": row["features"][:-1]} for row in rows]
    return changed, Calibration.from_rows(rows)


def _updated(config: StreamConfig, values: list[bytes], cut: int, drop_feature: bool = False,
             checkpoint: bool = False) -> StreamMonitor:
    """The monitor of version 2 taking over at ``cut`` from version 1's state, as the worker's
    refresh does (``checkpoint``: from the state encoded as a checkpoint, as a restart does)."""
    first = _monitor(config)
    _feed(first, values[:cut], 50)
    state = first.state_dict()
    if checkpoint:
        state = decode_state(*encode_state(state))
    changed, calibration = _changed(config, drop_feature)
    second = StreamMonitor(changed, calibration, config_version=2)
    second.load_state(state)
    return second


def _versions(got: dict[str, list[dict[str, Any]]], alarm_id: str) -> list[dict[str, Any]]:
    return [a for a in got["alarms"] if a["id"] == alarm_id]


def _evidence(got: dict[str, list[dict[str, Any]]], alarm_id: str) -> list[dict[str, Any]]:
    return [e["evidence"] for e in got["evidence"] if e["alarm_id"] == alarm_id]


def test_pending_revisions_and_open_windows_survive_an_update(
    example: tuple[StreamConfig, list[bytes]]
) -> None:
    config, values = example
    cut, covariate = _cut(config, values)
    reference = _feed(_monitor(config), values, 500)  # version 1 throughout
    first = _monitor(config)
    _feed(first, values[:cut], 50)
    waiting = dict(first._unrevised)
    (conditional,) = [a for a in waiting.values() if a.detector == "conditional"]
    assert set(waiting) == {covariate["id"], conditional.id}
    assert first.attribution.pending == (covariate["id"],)  # its window is open

    got = _feed(_updated(config, values, cut), values[cut:], 50)
    for alarm in waiting.values():
        (expected,) = [a for a in _versions(reference, alarm.id) if a["revision"] == 2]
        (revised,) = _versions(got, alarm.id)
        # Revised by the version that raised it: the uninterrupted run's revision, the
        # version in force named.
        assert revised["kind"] != "insufficient_evidence"
        assert revised["evidence"].pop("revised_under_config_version") == 2
        assert revised == expected
        assert revised["evidence"]["config_version"] == 1
        # Attributed against version 1's calibration and window: the uninterrupted run's.
        assert _evidence(got, alarm.id) == _evidence(reference, alarm.id)
        (attribution,) = _evidence(got, alarm.id)
        assert attribution["attribution"]["window"]["n"] == WINDOW
    # The conditional alarm turned extreme: its window opened after its revision (issue #16).
    (revised,) = _versions(got, conditional.id)
    assert revised["kind"] == "extreme_covariate_shift"
    # Version 2's own alarms are its own.
    assert all(a["evidence"]["config_version"] == 2 for a in got["alarms"]
               if a["id"] not in waiting)


@pytest.mark.parametrize("drop_feature", [False, True])
def test_per_event_batches_and_checkpoints_agree(
    example: tuple[StreamConfig, list[bytes]], drop_feature: bool
) -> None:
    config, values = example
    cut, _ = _cut(config, values)
    rest = _other_features(values, cut) if drop_feature else values[cut:]
    reference = _updated(config, values, cut, drop_feature)
    expected = _feed(reference, rest, None)
    assert expected["alarms"]
    for batch in (1, 13, 5000):
        monitor = _updated(config, values, cut, drop_feature, checkpoint=batch == 13)
        assert _feed(monitor, rest, batch) == expected
        assert canonical(monitor.state_dict()) == canonical(reference.state_dict())
    # A checkpoint while the old version's detectors still wait (a restart after the update):
    # the same records.
    for stop in (3, 12, 40):
        first = _updated(config, values, cut, drop_feature)
        before = _feed(first, rest[:stop], 7)
        changed, calibration = _changed(config, drop_feature)
        resumed = StreamMonitor(changed, calibration, config_version=2)
        resumed.load_state(decode_state(*encode_state(first.state_dict())))
        after = _feed(resumed, rest[stop:], 7)
        assert {k: before[k] + after[k] for k in before} == expected


def _other_features(values: list[bytes], cut: int) -> list[bytes]:
    """The events after ``cut`` as version 2 without the last feature reads them: predictions
    without it, and without the labels of the predictions before the cut. Those are still in
    the label store with five features, which the new detectors cannot use: each such label is
    refused (a dead letter naming why; tests/pipeline/test_update_inflight_labels.py), and
    ``_feed`` observes events directly, without the pipeline that turns it into one."""
    before = {json.loads(v)["id"] for v in values[:cut]}
    out = []
    for value in values[cut:]:
        event = json.loads(value)
        if event["kind"] == "prediction":
            event["features"] = event["features"][:-1]
        elif event["id"] in before:
            continue
        out.append(json.dumps(event).encode())
    return out


def test_other_features_close_them_explicitly(
    example: tuple[StreamConfig, list[bytes]]
) -> None:
    config, values = example
    cut, covariate = _cut(config, values)
    first = _monitor(config)
    _feed(first, values[:cut], 50)
    waiting = dict(first._unrevised)
    second = _updated(config, values, cut, drop_feature=True)
    got = _feed(second, _other_features(values, cut), 50)
    reason = "configuration version 2 monitors other features (x0, x1, x2, x3; before: x0, " \
             "x1, x2, x3, x4)"
    for alarm in waiting.values():
        # one last revision, at once (the first records drained), still without a kind
        (closed,) = _versions(got, alarm.id)
        assert got["alarms"].index(closed) < len(waiting)
        assert closed["revision"] == 2 and closed["kind"] == "insufficient_evidence"
        assert closed["evidence"]["closed_by_config_version"] == 2
        assert closed["evidence"]["closed_reason"] == reason
        assert first.last_ts is not None
        assert datetime.fromisoformat(closed["revised_at"]) == first.last_ts
    # the covariate alarm's window had just opened: closed with what it had (nothing)
    assert [e for e in got["evidence"] if e["alarm_id"] in waiting] == [{
        "stream": config.name, "alarm_id": covariate["id"], "ts": closed["revised_at"],
        "evidence": {"attribution_not_completed": {
            "closed_by_config_version": 2, "reason": reason,
            "window": {"start_index": None, "n": 0, "end_index": None},
        }},
    }]


def test_a_checkpoint_with_an_open_window_resumes_it(
    example: tuple[StreamConfig, list[bytes]]
) -> None:
    """Without an update: a restart while an attribution window fills completes the same
    attribution (the window's rows are part of the checkpoint)."""
    config, values = example
    cut, covariate = _cut(config, values)
    reference = _feed(_monitor(config), values, 50)
    stop = cut + 20  # part of the covariate alarm's window collected
    first = _monitor(config)
    before = _feed(first, values[:stop], 50)
    assert covariate["id"] in first.attribution.pending
    resumed = _monitor(config)
    resumed.load_state(decode_state(*encode_state(first.state_dict())))
    after = _feed(resumed, values[stop:], 50)
    assert _evidence(before, covariate["id"]) == []
    assert _evidence(after, covariate["id"]) == _evidence(reference, covariate["id"]) != []


def test_a_worker_refreshing_the_stream_stores_their_revisions(
    example: tuple[StreamConfig, list[bytes]], empty_database_url: str
) -> None:
    """End to end: a worker picks up version 2 between two batches while two alarms wait for
    their revision and one for its attribution; the stored alarms end revised and attributed
    (each version in ``alarm_revisions``) as without the update."""
    from sqlalchemy import select

    from monitor.db.engine import make_engine
    from monitor.db.models import AlarmRevisionRow

    config, values = example
    cut, _ = _cut(config, values)
    batch = 25
    reference = _feed(_monitor(config), values, 500)
    waiting: dict[str, Any] = {}

    def before_update(monitor: StreamMonitor) -> None:
        waiting.update(monitor._unrevised)
        assert monitor.attribution.pending

    monitor = run_worker_with_update(
        config, values, empty_database_url, batch_size=batch,
        update_after=cut // batch + 1,  # the first batch boundary after the covariate alarm
        version2=_changed(config), before_update=before_update,
    )
    assert monitor.config_version == 2
    assert len(waiting) == 2
    engine = make_engine(empty_database_url)
    try:
        with engine.connect() as connection:
            stored = connection.execute(
                select(AlarmRevisionRow.alarm_id, AlarmRevisionRow.revision,
                       AlarmRevisionRow.kind, AlarmRevisionRow.evidence)
                .where(AlarmRevisionRow.alarm_id.in_(sorted(waiting)))
                .order_by(AlarmRevisionRow.alarm_id, AlarmRevisionRow.revision)
            ).all()
    finally:
        engine.dispose()
    for alarm_id in waiting:
        versions = [row for row in stored if row.alarm_id == alarm_id]
        expected = _versions(reference, alarm_id)
        assert [(v.revision, v.kind) for v in versions] == [
            (1, "insufficient_evidence"), (2, expected[1]["kind"]), (3, expected[1]["kind"])
        ]
        assert versions[1].evidence["revised_under_config_version"] == 2
        assert versions[2].evidence["attribution"] == _evidence(reference, alarm_id)[0][
            "attribution"]
