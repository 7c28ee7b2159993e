"""One time base (docs/persistence.md): every stored row of a prediction carries its event time.

Labels arrive three hours after their predictions. The conditional detector's trace points and
alarms must still sit at the predictions' times — the same clock as the covariate trace — in the
batch path and in the per-event reference path; dead letters carry their record's own ``ts``
where it can be read and say where their time came from.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.engine.pipeline import Pipeline, RawRecord
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs
from tests.support.oracle import PerEventPipeline

LATE = timedelta(hours=3)


def _late_labels(folder: Path) -> tuple[Path, list[bytes], dict[str, datetime]]:
    paths = build_example(folder, seed=3, n_calibration=300, label_delay=5,
                          phases=[("stable", 300), ("concept", 300)])
    values, times = [], {}
    for line in paths["events"].read_text().splitlines():
        event = json.loads(line)
        ts = datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))
        if event["kind"] == "prediction":
            times[event["id"]] = ts
        else:
            event["ts"] = (ts + LATE).isoformat()
        values.append(json.dumps(event).encode())
    return paths["config"], values, times


@pytest.mark.parametrize("per_event", [False, True], ids=["batch", "per-event"])
def test_labels_hours_late_leave_both_traces_on_the_prediction_clock(
    tmp_path: Path, per_event: bool
) -> None:
    config, values, times = _late_labels(tmp_path)
    by_index = list(times.values())  # event_index = position among the stream's predictions
    bad = b'{"kind": "prediction", "stream": "shuttle", "ts": "2026-01-01T05:00:00Z"}'
    values.append(bad)
    monitors = build_monitors(read_configs([str(config)]))
    pipeline = (PerEventPipeline if per_event else Pipeline)(monitors, "file:events")
    records = [RawRecord("events", 0, i, v, timestamp_ms=1_800_000_000_000 + i)
               for i, v in enumerate(values)]
    outs = [pipeline.process(records[i : i + 100]) for i in range(0, len(records), 100)]
    traces = [t for out in outs for t in out.trace_points]
    alarms = [a for out in outs for a in out.alarms]
    letters = [d for out in outs for d in out.dead_letters]
    assert {t.detector for t in traces} == {"covariate", "conditional"}
    assert any(a.detector == "conditional" for a in alarms), "the concept shift is detected"
    for point in traces:
        assert point.ts == by_index[point.event_index], point
    for alarm in alarms:
        assert alarm.ts == times[alarm.event_id] == by_index[alarm.event_index], alarm
    (letter,) = letters  # the prediction without features: its own ts, said to be the event's
    assert letter.ts == datetime(2026, 1, 1, 5, tzinfo=UTC) and letter.ts_source == "event"


def test_dead_letter_time_falls_back_to_the_broker_then_to_ingest() -> None:
    pipeline = Pipeline({}, "file:events")
    out = pipeline.process([
        RawRecord("events", 0, 0, b"not json", timestamp_ms=1_800_000_000_000),
        RawRecord("events", 0, 1, b'{"ts": "yesterday"}', timestamp_ms=None),
        RawRecord("events", 0, 2, b'{"kind": "label", "stream": "x", "id": "a", "label": 1, '
                                  b'"ts": "2026-01-01T00:00:00+00:00"}'),
    ])
    broker, ingest, event = out.dead_letters
    assert (broker.ts_source, broker.ts) == ("broker", datetime.fromtimestamp(1_800_000_000, UTC))
    assert ingest.ts_source == "ingest"
    assert abs(ingest.ts - datetime.now(UTC)) < timedelta(minutes=5)
    assert event.ts_source == "event" and event.ts == datetime(2026, 1, 1, tzinfo=UTC)
    assert event.reason == "unknown stream 'x'"
