"""What a label-free estimator is: a model of each event's loss fitted on labelled calibration
rows, whose mean over a window of unlabelled events estimates the window's metric."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.detectors.base import FloatArray, as_matrix, derive_seed

__all__ = ["LossEstimator", "split_calibration"]


class LossEstimator(ABC):
    """A per-event loss model ℓ̂(z) ≈ E[loss | z] of a deployed model, fitted on labelled rows.

    ``z`` is what the estimator reads of an event (the class probabilities of a classifier, the
    features and prediction of a regressor); :meth:`estimate` is the window's expected metric,
    :meth:`realised` the same metric once the window's labels are known.
    """

    #: Name of the metric :meth:`estimate` and :meth:`realised` return.
    metric: str

    @abstractmethod
    def fit(self, Z: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        """Fit on labelled rows; ``sample_weight`` (importance weights w(z) of the rows towards
        a target window, PAPE-style) makes it estimate the metric under the weighted law."""

    @abstractmethod
    def predicted_loss(self, Z: ArrayLike) -> FloatArray:
        """ℓ̂ of each row (larger = the model is expected to be worse there)."""

    def flag_score(self, Z: ArrayLike) -> FloatArray:
        """What :class:`LabelFreeHarmDetector` thresholds: ℓ̂ by default; an estimator whose ℓ̂
        is a step function may break its ties by a finer score in the same order."""
        return self.predicted_loss(Z)

    @abstractmethod
    def estimate(self, Z: ArrayLike) -> float:
        """Expected metric over the rows of a window, without labels."""

    @abstractmethod
    def realised(self, Z: ArrayLike, y: ArrayLike) -> float:
        """The metric over the same rows once their labels ``y`` are known."""

    @abstractmethod
    def clone(self) -> Self:
        """An unfitted copy with the same parameters."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (builtins and numpy arrays); :meth:`from_state` rebuilds it."""

    @classmethod
    @abstractmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild an estimator saved with :meth:`state_dict`."""


def split_calibration(
    n: int, fit_fraction: float, seed: int | None, min_rest: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Random indices of the two parts of ``n`` calibration rows: the first ``fit_fraction``
    (rounded) and the rest; ValueError unless both parts are non-empty (the rest >= min_rest)."""
    if not (isinstance(fit_fraction, int | float) and 0.0 < fit_fraction < 1.0):
        raise ValueError(f"fit_fraction must lie in (0, 1), got {fit_fraction!r}")
    n_fit = round(fit_fraction * n)
    if not 1 <= n_fit <= n - min_rest:
        raise ValueError(
            f"fit_fraction={fit_fraction} leaves no room for both parts of {n} calibration "
            f"rows (need >= 1 to fit and >= {min_rest} for the rest)"
        )
    order = np.random.default_rng(derive_seed(seed, 0)).permutation(n)
    return order[:n_fit], order[n_fit:]


def check_weights(sample_weight: ArrayLike | None, n: int) -> FloatArray | None:
    """``sample_weight`` as n finite non-negative floats with a positive sum (None stays None)."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(
            f"sample_weight must be {n} finite non-negative numbers with a positive sum"
        )
    return w


def check_rows(Z: ArrayLike, y: ArrayLike, name: str = "Z") -> tuple[FloatArray, np.ndarray]:
    """A finite matrix and a label vector of the same length."""
    arr = as_matrix(Z, name)
    labels = np.asarray(y)
    if labels.shape != (arr.shape[0],):
        raise ValueError(f"y must hold one label per row of {name} ({arr.shape[0]}), "
                         f"got shape {labels.shape}")
    return arr, labels


def check_unit_interval(name: str, value: object) -> None:
    """Raise a ValueError unless ``value`` is a number in the open interval (0, 1)."""
    if not (isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1):
        raise ValueError(f"{name} must lie in (0, 1), got {value!r}")
