"""The warm-up of a time budget and events without ``ts``, through a stream (``StreamMonitor``)
under the default alarm budget (7 days, ``events`` 50 000, ``min_threshold`` 100 000).

Before the event-count warm-up a detector's first 256 updates ran at the threshold of
100 000 events/s (2 · 7 d · 10⁵/s ≈ 1.2·10¹¹), and events without ts took the ingest time, so a
replay at full speed looked like ≈12 000 events/s (threshold ≈ 1.5·10¹⁰). On the seeded stream
below, a covariate shift at event 100 (with ts, 1 event/s) was first alarmed at event 256 (the
end of warm-up; delay 156) and one at event 500 of a replay without ts at 695 (delay 195). With
the warm-up on 2 · 50 000 and events without ts on the same event-count threshold: 195 and 586.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np

from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.events import Event, decode_event
from monitor.streams.join import LabelJoin, Pending
from monitor.streams.monitor import StreamMonitor
from tests.support.streams import canonical

T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: The ingest clock of a replay at full speed: 12 000 events per second.
REPLAY_RATE = 12_000.0


def _stream_and_events(
    n: int, change: int, with_ts: bool, seed: int = 0
) -> tuple[StreamMonitor, list[Event]]:
    """A stream calibrated on 400 rows and ``n`` labelled predictions whose first input moves
    by 1.5 standard deviations at ``change`` (with ts: one per second)."""
    rng = np.random.default_rng(seed)
    rows = [{"features": rng.normal(size=3).tolist(), "prediction": 0.0,
             "label": float(rng.normal())} for _ in range(400)]
    monitor = StreamMonitor(StreamConfig(name="s", task="regression", calibration=[]),
                            Calibration.from_rows(rows))
    events = []
    for k in range(n):
        x, y = rng.normal(size=3), float(rng.normal())
        x[0] += 1.5 if k >= change else 0.0
        event = {"kind": "prediction", "stream": "s", "id": f"e{k}", "features": x.tolist(),
                 "prediction": 0.0, "label": y}
        if with_ts:
            event["ts"] = (T0 + timedelta(seconds=k)).isoformat()
        events.append(decode_event(event))
    return monitor, events


def _first_alarm(monitor: StreamMonitor, events: list[Event], batch: int = 100) -> int | None:
    first = None
    for start in range(0, len(events), batch):
        monitor.step(events[start : start + batch],
                     lambda k, s=start: T0 + timedelta(seconds=(s + k) / REPLAY_RATE))
        alarms = monitor.drain()[0]
        if alarms and first is None:
            first = min(a.event_index for a in alarms)
    return first


def test_a_shift_during_warm_up_is_detected_before_the_warm_up_ends() -> None:
    monitor, events = _stream_and_events(400, 100, with_ts=True)
    assert {d: b.threshold for d, b in monitor.detectors.budgets.items()} == {
        "covariate": 100_000.0, "conditional": 100_000.0}
    assert _first_alarm(monitor, events) == 195  # was 256
    assert monitor.events_without_ts == 0
    assert monitor.detectors.budgets["covariate"].rate == 1.0  # measured after warm-up


def test_a_replay_without_ts_runs_on_the_event_count_threshold() -> None:
    """Without ts the ingest clock (12 000 events/s here) never reaches the budget: every
    update is one without an event time, at max(min_threshold, 2 · events)."""
    monitor, events = _stream_and_events(800, 500, with_ts=False)
    assert _first_alarm(monitor, events) == 586  # was 695
    assert monitor.events_without_ts == 800
    for budget in monitor.detectors.budgets.values():
        assert budget.warming_up and budget.threshold == 100_000.0


def test_an_old_checkpoint_loads_with_no_events_without_ts_and_the_new_warm_up() -> None:
    """A state written before the count and the event-count warm-up (no ``events_without_ts``
    key, budgets without ``events`` and with the 100 000/s threshold) resumes with a count of 0
    and the warm-up on 2 · 50 000, continuing as a stream that had them."""
    monitor, events = _stream_and_events(150, 1000, with_ts=True)
    monitor.step(events[:100], lambda k: T0)
    state = monitor.state_dict()
    assert "events_without_ts" not in state  # every event had a ts: the state of before
    for budget in state["detectors"]["budgets"].values():
        del budget["params"]["events"]
        budget["threshold"] = 2 * 7 * 86_400.0 * 100_000.0
    old = _stream_and_events(0, 0, with_ts=True)[0]
    old.load_state(state)
    assert old.events_without_ts == 0
    assert {b.threshold for b in old.detectors.budgets.values()} == {100_000.0}
    old.step(events[100:], lambda k: T0)
    monitor.step(events[100:], lambda k: T0)
    assert canonical(old.state_dict()) == canonical(monitor.state_dict())


def test_the_label_join_keeps_which_predictions_had_no_ts() -> None:
    """The mark travels in the checkpoint (an eighth item only when set: a join state of
    before loads as timed) and does not change the join's time, which is the fallback's."""
    join = LabelJoin(max_pending=10, max_delay_seconds=60.0)
    join.add_prediction(Pending("a", 0, 5.0, (1.0,), 2.0, untimed=True))
    join.add_prediction(Pending("b", 1, 6.0, (1.0,), 2.0))
    state = join.state_dict()
    assert [len(row) for row in state["predictions"]] == [8, 5]
    again = LabelJoin(max_pending=10, max_delay_seconds=60.0)
    again.load_state(state)
    assert [again.waiting(i).untimed for i in "ab"] == [True, False]  # type: ignore[union-attr]
    assert again.waiting("a").ts == 5.0  # type: ignore[union-attr]
    assert not math.isnan(again.waiting("a").ts)  # type: ignore[union-attr]
