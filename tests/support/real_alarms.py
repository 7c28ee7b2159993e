"""Real alarms for the report tests: the Shuttle stream (river's bundled data) with a stable
phase, a benign covariate shift with a concept shift, and an extreme covariate shift, run
through the stream monitor. It raises a concept-shift alarm and extreme-covariate-shift alarms.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from monitor.db.engine import session_factory
from monitor.ops.datasets import (
    SHUTTLE_FEATURES,
    ScriptedStream,
    load_shuttle_regression,
    make_stream,
)
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.events import PredictionEvent
from monitor.streams.monitor import StreamMonitor
from monitor.streams.records import Alarm, TracePoint

STREAM = "shuttle"
PHASES = (("stable", 300), ("benign_covariate+concept", 300), ("extreme_covariate", 300))
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@functools.lru_cache(maxsize=1)
def scripted_stream() -> ScriptedStream:
    """The stream's calibration rows and events (predictions and labels)."""
    return make_stream(load_shuttle_regression(), PHASES, n_calibration=500, seed=0)


@functools.lru_cache(maxsize=1)
def shuttle_records() -> tuple[tuple[Alarm, ...], tuple[TracePoint, ...]]:
    """The alarms and trace points of the stream (computed once per test process)."""
    data = scripted_stream()
    calibration = Calibration(data.X_calibration, data.pred_calibration, data.y_calibration)
    config = StreamConfig(
        name=STREAM, task="regression", calibration="in memory",
        alarm={"rule": "shiryaev_roberts", "threshold": 10_000},
        covariate_alarm={"rule": "shiryaev_roberts", "threshold": 1000},
    )
    monitor = StreamMonitor(config, calibration)
    events = [
        PredictionEvent(stream=STREAM, id=f"e-{i:06d}", ts=T0 + timedelta(seconds=i),
                        features=data.X[i].tolist(), prediction=float(data.pred[i]),
                        label=float(data.y[i]))
        for i in range(len(data))
    ]
    assert monitor.step(events, lambda k: T0) == []
    alarms, traces, _ = monitor.drain()
    return tuple(alarms), tuple(traces)


def performance_windows(size: int = 100) -> list[dict[str, Any]]:
    """The model's MAE and RMSE over consecutive windows of ``size`` events of the stream, in
    the report's performance-window format."""
    data = scripted_stream()
    y, pred = data.y, data.pred
    windows = []
    for k, start in enumerate(range(0, len(y), size)):
        error = pred[start:start + size] - y[start:start + size]
        windows.append({
            "stream": STREAM, "window_index": k, "start_index": start,
            "end_index": start + len(error) - 1, "ts": (T0 + timedelta(seconds=start)).isoformat(),
            "n": len(error),
            "metrics": {"mae": float(np.abs(error).mean()),
                        "rmse": float(np.sqrt((error**2).mean()))},
        })
    return windows


def attribution(start: int, stop: int) -> dict[str, Any]:
    """Per-feature two-sample Kolmogorov–Smirnov tests of the stream's inputs ``[start, stop)``
    against the calibration inputs, Benjamini–Hochberg adjusted (Benjamini & Hochberg 1995,
    step-up rule), in the ``evidence["attribution"]`` format."""
    from scipy.stats import ks_2samp

    X, X_cal = scripted_stream().X, scripted_stream().X_calibration
    tests = [ks_2samp(X[start:stop, j], X_cal[:, j]) for j in range(X.shape[1])]
    p = np.array([t.pvalue for t in tests])
    order = np.argsort(p)
    m = len(p)
    adjusted = np.minimum.accumulate((p[order] * m / np.arange(1, m + 1))[::-1])[::-1]
    p_adjusted = np.empty(m)
    p_adjusted[order] = np.minimum(adjusted, 1.0)
    return {
        "method": "ks_2samp", "guarantee": "FDR <= 0.05 (Benjamini-Hochberg)",
        "window": {"start_index": start, "end_index": stop - 1, "n": stop - start},
        "features": [{"feature": SHUTTLE_FEATURES[j], "statistic": float(tests[j].statistic),
                      "p_value": float(p[j]), "p_adjusted": float(p_adjusted[j])}
                     for j in range(m)],
    }


def directions(start: int, stop: int) -> list[dict[str, Any]]:
    """Per-feature standardised mean differences of the inputs ``[start, stop)`` from the
    calibration inputs, in the ``evidence["density_ratio_directions"]`` format (for a Gaussian
    shift of the mean, the direction of the log density ratio)."""
    X, X_cal = scripted_stream().X, scripted_stream().X_calibration
    delta = (X[start:stop].mean(axis=0) - X_cal.mean(axis=0)) / X_cal.std(axis=0)
    return [{"feature": name, "weight": float(w)} for name, w in zip(SHUTTLE_FEATURES, delta,
                                                                      strict=True)]


@dataclass(frozen=True)
class ReportDatabase:
    url: str
    engine: Engine
    #: The stream's alarms as stored; the first concept-shift alarm carries an attribution and
    #: density-ratio directions in its evidence, the others only what the detectors wrote.
    alarms: tuple[Alarm, ...]
    explained: Alarm

    def session(self) -> Session:
        return session_factory(self.engine)()
