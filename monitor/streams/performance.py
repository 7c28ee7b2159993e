"""Model performance over time: windowed metrics of a stream's labelled events (docs/explain.md).

Every ``window`` labelled events (in the order their labels joined) close one window:
regression streams get MAE and RMSE, classification streams accuracy, log-loss and the recall
of each class present in the window. Pure computation, no I/O; the state round-trips through
:meth:`PerformanceWindows.state_dict`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["DEFAULT_WINDOW", "LOG_LOSS_EPS", "ClosedWindow", "PerformanceWindows",
           "classification_metrics", "regression_metrics"]

#: Default number of labelled events per performance window.
DEFAULT_WINDOW = 500

#: Probabilities are clipped to [eps, 1 − eps] before the logarithm (log-loss stays finite).
LOG_LOSS_EPS = 1e-15


def regression_metrics(
    predictions: NDArray[np.float64], labels: NDArray[np.float64]
) -> dict[str, float]:
    """Mean absolute error and root mean squared error."""
    residual = np.asarray(labels, np.float64) - np.asarray(predictions, np.float64)
    return {"mae": float(np.mean(np.abs(residual))),
            "rmse": float(math.sqrt(float(np.mean(residual * residual))))}


def classification_metrics(
    probabilities: NDArray[np.float64], labels: NDArray[np.int64]
) -> dict[str, float]:
    """Accuracy (argmax prediction), log-loss −mean log p̂(y) (rows renormalised to sum 1, then
    clipped to [eps, 1 − eps]) and ``recall_class_k`` = share of class-k events predicted k, for
    each class k present."""
    proba = np.asarray(probabilities, np.float64)
    y = np.asarray(labels, np.int64)
    proba = proba / proba.sum(axis=1, keepdims=True)
    predicted = np.argmax(proba, axis=1)
    correct = predicted == y
    p_true = np.clip(proba[np.arange(y.size), y], LOG_LOSS_EPS, 1.0 - LOG_LOSS_EPS)
    metrics = {"accuracy": float(np.mean(correct)), "log_loss": float(-np.mean(np.log(p_true)))}
    for k in range(proba.shape[1]):
        of_k = y == k
        if of_k.any():
            metrics[f"recall_class_{k}"] = float(np.mean(correct[of_k]))
    return metrics


@dataclass(frozen=True, slots=True)
class ClosedWindow:
    """One closed window: its number, the smallest and largest event index of its labelled
    events, the event time of its last labelled event, its size and metrics."""

    window_index: int
    start_index: int
    end_index: int
    ts: datetime
    n: int
    metrics: dict[str, float]


class PerformanceWindows:
    """Windowed metrics of one stream's labelled events.

    Parameters
    ----------
    n_classes
        None for a regression stream (predictions and labels are numbers), else the number of
        classes (predictions are probability vectors, labels class indexes).
    window
        Labelled events per window, >= 10.

    Examples
    --------
    >>> from datetime import datetime, UTC
    >>> perf = PerformanceWindows(None, window=10)
    >>> ts = datetime(2026, 1, 1, tzinfo=UTC)
    >>> closed = perf.add([float(i) for i in range(12)], [i + 0.5 for i in range(12)],
    ...                   list(range(12)), [ts] * 12)
    >>> [(w.window_index, w.start_index, w.end_index, w.n, w.metrics) for w in closed]
    [(0, 0, 9, 10, {'mae': 0.5, 'rmse': 0.5})]
    """

    def __init__(self, n_classes: int | None, window: int = DEFAULT_WINDOW) -> None:
        if not (isinstance(window, int) and window >= 10):
            raise ValueError(f"window must be an integer >= 10, got {window!r}")
        if n_classes is not None and not (isinstance(n_classes, int) and n_classes >= 2):
            raise ValueError(f"n_classes must be None (regression) or >= 2, got {n_classes!r}")
        self.n_classes = n_classes
        self.window = window
        self.window_index = 0
        self._predictions: list[Any] = []
        self._labels: list[Any] = []
        self._indexes: list[int] = []

    def add(
        self,
        predictions: Sequence[Any],
        labels: Sequence[Any],
        event_indexes: Sequence[int],
        ts: Sequence[datetime],
    ) -> list[ClosedWindow]:
        """Labelled events in join order (``ts``: each one's event time); the windows they
        closed."""
        closed: list[ClosedWindow] = []
        start = 0
        while start < len(labels):
            take = min(self.window - len(self._labels), len(labels) - start)
            stop = start + take
            self._predictions.extend(predictions[start:stop])
            self._labels.extend(labels[start:stop])
            self._indexes.extend(int(i) for i in event_indexes[start:stop])
            if len(self._labels) == self.window:
                closed.append(self._close(ts[stop - 1]))
            start = stop
        return closed

    def _close(self, ts: datetime) -> ClosedWindow:
        if self.n_classes is None:
            metrics = regression_metrics(np.asarray(self._predictions, np.float64),
                                         np.asarray(self._labels, np.float64))
        else:
            metrics = classification_metrics(np.asarray(self._predictions, np.float64),
                                             np.asarray(self._labels, np.int64))
        window = ClosedWindow(self.window_index, min(self._indexes), max(self._indexes), ts,
                              len(self._labels), metrics)
        self.window_index += 1
        self._predictions, self._labels, self._indexes = [], [], []
        return window

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state: the open window's events and the window counter."""
        return {
            "n_classes": self.n_classes,
            "window": self.window,
            "window_index": self.window_index,
            "predictions": [list(p) if isinstance(p, tuple | list) else p
                            for p in self._predictions],
            "labels": list(self._labels),
            "indexes": list(self._indexes),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> PerformanceWindows:
        obj = cls(state["n_classes"], int(state["window"]))
        obj.window_index = int(state["window_index"])
        obj._predictions = [tuple(p) if isinstance(p, list) else float(p)
                            for p in state["predictions"]]
        obj._labels = list(state["labels"])
        obj._indexes = [int(i) for i in state["indexes"]]
        return obj
