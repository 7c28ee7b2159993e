"""What a stream keeps of its covariate monitor across batches and checkpoints: a labelled
event's support flag is its prediction's, kept in the label join (each input is scored once,
with the same results as scoring it again at its label), and a checkpoint written before the
bounded reference existed takes the configured limit at its load."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from monitor.core.detectors import CovariateMonitor
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.events import Event, LabelEvent, PredictionEvent
from monitor.streams.monitor import StreamMonitor
from tests.support.real_alarms import STREAM, T0, scripted_stream

#: Labels arrive this many events after their predictions: most in a later batch.
DELAY = 70
BATCH = 100


def _events() -> list[Event]:
    """The Shuttle stream's predictions, each label ``DELAY`` events later."""
    data = scripted_stream()
    out: list[tuple[float, int, Event]] = []
    for i in range(len(data)):
        ts = T0 + timedelta(seconds=i)
        out.append((i, 0, PredictionEvent(stream=STREAM, id=f"e-{i:06d}", ts=ts,
                                          features=data.X[i].tolist(),
                                          prediction=float(data.pred[i]))))
        out.append((i + DELAY + 0.5, 1, LabelEvent(stream=STREAM, id=f"e-{i:06d}",
                                                   ts=ts + timedelta(seconds=DELAY),
                                                   label=float(data.y[i]))))
    return [event for _, _, event in sorted(out, key=lambda item: item[:2])]


def _monitor() -> StreamMonitor:
    data = scripted_stream()
    config = StreamConfig(
        name=STREAM, task="regression", calibration="in memory",
        alarm={"rule": "shiryaev_roberts", "threshold": 10_000},
        covariate_alarm={"rule": "shiryaev_roberts", "threshold": 1000},
    )
    return StreamMonitor(
        config, Calibration(data.X_calibration, data.pred_calibration, data.y_calibration)
    )


def _run(forget_flags: bool, scored: list[int]) -> tuple[Any, ...]:
    """Every record of the stream run in batches, each batch resumed from the previous one's
    state; ``forget_flags`` drops the flags from the join's state, as a checkpoint written
    before they were kept."""
    monitor = _monitor()
    events = _events()
    records: list[Any] = []
    for start in range(0, len(events), BATCH):
        assert monitor.step(events[start:start + BATCH], lambda k: T0) == []
        alarms, traces, windows = monitor.drain()
        records += [*alarms, *traces, *windows]
        state = monitor.state_dict()
        if forget_flags:
            state["join"].pop("outside", None)
        monitor = _monitor()
        monitor.load_state(state)
    assert monitor.join.pending_predictions == 0
    return tuple(records), scored[0]


@pytest.fixture
def scored(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many stream rows the covariate monitors scored (a counter around the method; the
    calibration reference is scored by the scorer itself, not counted)."""
    count = [0]
    nonconformity = CovariateMonitor._nonconformity

    def counted(self: CovariateMonitor, X: np.ndarray) -> np.ndarray:
        count[0] += X.shape[0]
        return nonconformity(self, X)

    monkeypatch.setattr(CovariateMonitor, "_nonconformity", counted)
    return count


def test_each_input_is_scored_once(scored: list[int]) -> None:
    n = len(scripted_stream())
    events = _events()
    # labels whose prediction came in an earlier batch: the ones an old state scores again
    later = sum(
        1 for start in range(0, len(events), BATCH)
        for event in events[start:start + BATCH] if isinstance(event, LabelEvent)
        and event.id not in {e.id for e in events[start:start + BATCH]
                             if isinstance(e, PredictionEvent)}
    )
    kept, kept_rows = _run(False, scored)
    scored[0] = 0
    again, again_rows = _run(True, scored)
    assert kept == again  # the same alarms, trace points and OOD windows (their flagged ids)
    assert kept_rows == n  # each prediction scored once
    assert later > 0.9 * n and again_rows == n + later  # and once more at its label, if old
    assert sum(w.n_flagged for w in kept if hasattr(w, "n_flagged")) > 0
    assert any(getattr(r, "detector", None) == "covariate" for r in kept)


def test_a_checkpoint_of_before_the_limit_takes_the_configured_one() -> None:
    monitor = _monitor()
    assert monitor.step(_events()[:300], lambda k: T0) == []
    state = monitor.state_dict()
    assert state["detectors"]["covariate"]["params"].pop("reference_limit") == 20_000
    old = CovariateMonitor.from_state(state["detectors"]["covariate"])
    assert old.reference_limit is None  # what the checkpoint alone holds
    resumed = _monitor()
    resumed.load_state(state)
    assert resumed.detectors.covariate.reference_limit == 20_000
