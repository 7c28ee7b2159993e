"""Activation shaping on embeddings followed by the energy of the model's last layer.

The shaping scorers share one pipeline: shape the penultimate activations h (ReAct, ASH, SCALE,
BFAct, piecewise-linear), recompute the logits z = W·shape(h) + b with the model's last layer,
and score the negative energy T·logsumexp(z/T) (Liu et al. 2020, eq. 5). ``load_last_layer`` is
the only I/O of the package: it reads W (C×D) and b (C,) from an ``.npz`` file.
"""

from __future__ import annotations

import abc
import os
from typing import Self

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.ood._logits import row_logsumexp
from monitor.core.ood.base import (
    FloatArray,
    Scorer,
    as_matrix,
    check_percentile,
    check_positive,
    check_width,
)


def load_last_layer(path: str | os.PathLike[str]) -> tuple[FloatArray, FloatArray]:
    """Read the last layer ``(W, b)`` from an ``.npz`` file with arrays ``W`` (C×D) and ``b`` (C,).

    Examples
    --------
    >>> import numpy as np, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "head.npz"
    >>> np.savez(path, W=np.ones((3, 5)), b=np.zeros(3))
    >>> [a.shape for a in load_last_layer(path)]
    [(3, 5), (3,)]
    """
    with np.load(path, allow_pickle=False) as data:
        missing = {"W", "b"} - set(data.files)
        if missing:
            raise ValueError(f"{path}: the .npz must hold arrays 'W' and 'b'; missing {missing}")
        W, b = np.asarray(data["W"], dtype=np.float64), np.asarray(data["b"], dtype=np.float64)
    check_last_layer(W, b)
    return W, b


def check_last_layer(W: ArrayLike, b: ArrayLike) -> None:
    """Raise unless ``W`` is a finite (C, D) matrix and ``b`` a finite (C,) vector, C >= 2."""
    W_arr, b_arr = np.asarray(W, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if W_arr.ndim != 2 or W_arr.shape[0] < 2:
        raise ValueError(f"W must be a (n_classes >= 2, n_dims) matrix, got shape {W_arr.shape}")
    if b_arr.shape != (W_arr.shape[0],):
        raise ValueError(f"b must have shape ({W_arr.shape[0]},) to match W, got {b_arr.shape}")
    if not (np.isfinite(W_arr).all() and np.isfinite(b_arr).all()):
        raise ValueError("W and b must be finite")


class ShapedEnergy(Scorer):
    """Base class: energy of the last layer applied to shaped activations (subclass ``shape``).

    Parameters
    ----------
    W
        Last-layer weights, shape (C, D).
    b
        Last-layer bias, shape (C,).
    temperature
        Energy temperature T > 0.
    """

    input = "embedding"

    def __init__(self, W: ArrayLike, b: ArrayLike, temperature: float = 1.0) -> None:
        check_last_layer(W, b)
        check_positive("temperature", temperature)
        self.W = W
        self.b = b
        self.temperature = temperature

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Learn the shaping's calibration statistics from embeddings ``X`` (``y`` is ignored)."""
        self._fit_shaping(self._embeddings(X))
        return self

    def score(self, X: ArrayLike) -> FloatArray:
        """Negative energy ``T·logsumexp((W·shape(h) + b)/T)`` of each embedding row."""
        self._require_fitted()
        return self.energy(self.shape(self._embeddings(X)))

    def energy(self, H: FloatArray) -> FloatArray:
        """Negative energy of the logits ``W·h + b`` of (already shaped) activations ``H``."""
        W, b = np.asarray(self.W, dtype=np.float64), np.asarray(self.b, dtype=np.float64)
        logits = H @ W.T + b
        return self.temperature * row_logsumexp(logits / self.temperature)

    @abc.abstractmethod
    def shape(self, H: FloatArray) -> FloatArray:
        """The shaped activations, same shape as ``H``."""

    def _fit_shaping(self, H: FloatArray) -> None:
        """Default: nothing to learn (per-sample shaping such as ASH and SCALE)."""

    def _embeddings(self, X: ArrayLike) -> FloatArray:
        H = as_matrix(X, "embedding")
        check_width(H, np.shape(self.W)[1], "embedding")
        return H


class PercentileShapedEnergy(ShapedEnergy):
    """A shaping with one percentile of the activations as its parameter (ReAct, ASH, SCALE).

    Parameters
    ----------
    W, b
        Last layer, shapes (C, D) and (C,).
    percentile
        The percentile p in [0, 100) the shaping cuts at (each subclass says of what).
    temperature
        Energy temperature.
    """

    def __init__(
        self, W: ArrayLike, b: ArrayLike, percentile: float = 90.0, temperature: float = 1.0
    ) -> None:
        super().__init__(W, b, temperature)
        check_percentile("percentile", percentile)
        self.percentile = percentile


def top_k_mask(H: FloatArray, percentile: float) -> np.ndarray:
    """Boolean mask of each row's largest ``D − round(D·percentile/100)`` entries (at least 1).

    The per-sample pruning of ASH (Djurisic et al. 2023, Sec. 3) and the denominator of SCALE.
    """
    D = H.shape[1]
    keep = max(1, D - round(D * percentile / 100.0))
    idx = np.argpartition(H, D - keep, axis=1)[:, D - keep :]
    mask = np.zeros(H.shape, dtype=bool)
    np.put_along_axis(mask, idx, True, axis=1)
    return mask


def sum_ratio(H: FloatArray, mask: np.ndarray) -> FloatArray:
    """s1/s2: row sum of all activations over the row sum of the kept ones (1 when s2 <= 0)."""
    s1 = H.sum(axis=1)
    s2 = np.where(mask, H, 0.0).sum(axis=1)
    safe = s2 > 0
    return np.where(safe, s1 / np.where(safe, s2, 1.0), 1.0)
