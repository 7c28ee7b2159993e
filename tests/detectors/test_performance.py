"""Model performance windows (monitor.streams.performance): metrics equal scikit-learn's on every
window."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sklearn.metrics import (
    accuracy_score,
    log_loss,
    mean_absolute_error,
    mean_squared_error,
    recall_score,
)

from monitor.streams.performance import PerformanceWindows

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def times(n: int) -> list[datetime]:
    return [T0 + timedelta(seconds=i) for i in range(n)]


@pytest.mark.parametrize("chunks", [[250], [1, 99, 37, 113], [60] * 4 + [10]])
def test_regression_windows_equal_sklearn(chunks: list[int]) -> None:
    rng = np.random.default_rng(1)
    n, window = sum(chunks), 40
    pred, y = rng.normal(size=n), rng.normal(size=n) * 3
    perf = PerformanceWindows(None, window)
    closed, start = [], 0
    for size in chunks:
        stop = start + size
        closed += perf.add(pred[start:stop].tolist(), y[start:stop].tolist(),
                           list(range(1000 + start, 1000 + stop)), times(n)[start:stop])
        start = stop
    assert [w.window_index for w in closed] == list(range(n // window))
    for w in closed:
        k = slice(w.window_index * window, (w.window_index + 1) * window)
        assert (w.start_index, w.end_index, w.n) == (1000 + k.start, 999 + k.stop, window)
        assert w.ts == times(n)[k.stop - 1]
        assert w.metrics["mae"] == pytest.approx(mean_absolute_error(y[k], pred[k]), rel=1e-12)
        assert w.metrics["rmse"] == pytest.approx(
            math.sqrt(mean_squared_error(y[k], pred[k])), rel=1e-12
        )


def test_classification_windows_equal_sklearn() -> None:
    rng = np.random.default_rng(2)
    n, window, classes = 300, 100, 3
    proba = rng.dirichlet(np.ones(classes), size=n)
    y = rng.integers(0, classes, size=n)
    y[200:300] = np.where(y[200:300] == 2, 0, y[200:300])  # class 2 absent from the last window
    proba[5] = [1.0, 0.0, 0.0]  # a zero probability: log-loss stays finite (clipped)
    y[5] = 1
    perf = PerformanceWindows(classes, window)
    closed = perf.add([tuple(p) for p in proba.tolist()], y.tolist(), list(range(n)), times(n))
    assert len(closed) == 3
    for w in closed:
        k = slice(w.window_index * window, (w.window_index + 1) * window)
        m = w.metrics
        assert m["accuracy"] == pytest.approx(accuracy_score(y[k], proba[k].argmax(axis=1)))
        expected_loss = log_loss(y[k], np.clip(proba[k], 1e-15, 1 - 1e-15), labels=[0, 1, 2])
        assert m["log_loss"] == pytest.approx(expected_loss, rel=1e-6)
        present = sorted(set(y[k].tolist()))
        recalls = recall_score(y[k], proba[k].argmax(axis=1), labels=present, average=None,
                               zero_division=0)
        assert {f"recall_class_{c}": m[f"recall_class_{c}"] for c in present} == pytest.approx(
            {f"recall_class_{c}": r for c, r in zip(present, recalls, strict=True)}
        )
        assert set(m) == {"accuracy", "log_loss", *(f"recall_class_{c}" for c in present)}
    assert "recall_class_2" not in closed[2].metrics


def test_state_round_trip_continues_exactly() -> None:
    rng = np.random.default_rng(3)
    proba = [tuple(p) for p in rng.dirichlet(np.ones(2), size=70).tolist()]
    y = rng.integers(0, 2, size=70).tolist()
    whole = PerformanceWindows(2, 25).add(proba, y, list(range(70)), times(70))
    first = PerformanceWindows(2, 25)
    head = first.add(proba[:33], y[:33], list(range(33)), times(70)[:33])
    resumed = PerformanceWindows.from_state(first.state_dict())
    tail = resumed.add(proba[33:], y[33:], list(range(33, 70)), times(70)[33:])
    assert head + tail == whole


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="window must be an integer >= 10"):
        PerformanceWindows(None, 5)
    with pytest.raises(ValueError, match="n_classes"):
        PerformanceWindows(1)
