"""Conditional nonconformity scores s(x, y) for the conditional monitor.

A nonconformity score is large when the label ``y`` conforms badly to the model's prediction for
``x``. The conditional monitor (:class:`monitor.core.detectors.ConditionalMonitor`) turns these
scores
into conformal p-values, so only their ordering matters: any strictly increasing transform gives
the same martingale.

- ``abs_residual``: |y − ŷ|, the standard regression score (Vovk, Gammerman & Shafer 2022,
  *Algorithmic Learning in a Random World*, 2nd ed., Sec. 2.3; used by WATCH, Prinster et al. 2025,
  Sec. 5).
- ``signed_residual``: y − ŷ, which detects a one-sided bias (the model under-predicts) rather
  than a loss of accuracy; a model that starts over-predicting makes its p-values *large*, which
  this score does not flag.
- ``normalized_residual``: |y − ŷ| / σ̂, the residual in units of the model's own predicted
  scale of its error σ̂(x) (the event's ``scale``: a predicted standard deviation, an
  interquantile width). Locally weighted conformal (Lei, G'Sell, Rinaldo, Tibshirani &
  Wasserman 2018, "Distribution-free predictive inference for regression", JASA 113(523),
  Sec. 5.2): a shift confined to inputs where the model expects little noise stands out,
  where under ``abs_residual`` it drowns among the large residuals of noisy inputs.
- ``one_minus_prob``: 1 − p̂(y | x), the classification score of the same references.

Every score here is a fixed function of (x, y) given the deployed model (ŷ and σ̂ are fixed
before the calibration and test data), so exchangeable pairs give exchangeable scores
(docs/algorithms.md, "Conditional scores").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
ConditionalScoreFn = Callable[[ArrayLike, ArrayLike], FloatArray]


def abs_residual(y: ArrayLike, yhat: ArrayLike) -> FloatArray:
    """Absolute residual |y − ŷ| (vectorised; scalars give a 0-d array).

    Examples
    --------
    >>> abs_residual([1.0, 5.0], [2.0, 2.0]).tolist()
    [1.0, 3.0]
    """
    return np.abs(signed_residual(y, yhat))


def signed_residual(y: ArrayLike, yhat: ArrayLike) -> FloatArray:
    """Signed residual y − ŷ (large when the model under-predicts).

    Examples
    --------
    >>> signed_residual([1.0, 5.0], [2.0, 2.0]).tolist()
    [-1.0, 3.0]
    """
    y_arr = np.asarray(y, dtype=np.float64)
    yhat_arr = np.asarray(yhat, dtype=np.float64)
    if y_arr.shape != yhat_arr.shape:
        raise ValueError(f"y has shape {y_arr.shape} but yhat has shape {yhat_arr.shape}")
    return y_arr - yhat_arr


def normalized_residual(y: ArrayLike, yhat: ArrayLike, scale: ArrayLike) -> FloatArray:
    """Scale-normalised residual |y − ŷ| / σ̂ (Lei et al. 2018, JASA, Sec. 5.2, the locally
    weighted residual |Y − μ̂(X)| / ρ̂(X)).

    ``scale`` is the model's predicted scale of its error, positive and finite.

    Examples
    --------
    >>> normalized_residual([1.0, 5.0], [2.0, 2.0], [0.5, 3.0]).tolist()
    [2.0, 1.0]
    """
    s = np.asarray(scale, dtype=np.float64)
    residual = abs_residual(y, yhat)
    if s.shape != residual.shape:
        raise ValueError(f"scale has shape {s.shape} but y has shape {residual.shape}")
    if not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError("scale must be positive and finite")
    return residual / s


def one_minus_prob(proba: ArrayLike, y: ArrayLike) -> FloatArray:
    """1 − p̂(y | x) from a probability vector ``(k,)`` or matrix ``(n, k)`` and class indices.

    Parameters
    ----------
    proba
        Predicted class probabilities: one vector of length k, or one row per event.
    y
        The true class index (an integer in ``[0, k)``), one per row of ``proba``.

    Examples
    --------
    >>> one_minus_prob([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]], [0, 1]).round(2).tolist()
    [0.3, 0.9]
    >>> float(one_minus_prob([0.25, 0.75], 1))
    0.25
    """
    p = np.asarray(proba, dtype=np.float64)
    labels = np.asarray(y)
    if p.ndim not in (1, 2) or p.shape[-1] < 2:
        raise ValueError(
            f"proba must be a vector (k,) or a matrix (n, k) with k >= 2, got {p.shape}"
        )
    if labels.shape != p.shape[:-1]:
        raise ValueError(f"y has shape {labels.shape}, expected {p.shape[:-1]} for proba {p.shape}")
    idx = _class_indices(labels, p.shape[-1])
    picked = np.take_along_axis(p, idx[..., None], axis=-1)[..., 0]
    return 1.0 - picked


def _class_indices(labels: np.ndarray, n_classes: int) -> np.ndarray:
    as_float = labels.astype(np.float64)
    idx = as_float.astype(np.intp)
    if not np.all(idx == as_float) or np.any(idx < 0) or np.any(idx >= n_classes):
        raise ValueError(f"y must hold class indices in [0, {n_classes}), got {labels.tolist()!r}")
    return idx


#: Every conditional score with the uniform signature ``(prediction, label) -> scores``.
CONDITIONAL_SCORES: dict[str, ConditionalScoreFn] = {
    "abs_residual": lambda prediction, label: abs_residual(label, prediction),
    "signed_residual": lambda prediction, label: signed_residual(label, prediction),
    "one_minus_prob": one_minus_prob,
}


#: The regression scores of one ``(ŷ, y)`` pair on Python floats: the same IEEE operation as
#: the vectorised functions above, without building arrays for every labelled event.
PAIR_RESIDUALS: dict[str, Callable[[float, float], float]] = {
    "abs_residual": lambda prediction, label: abs(label - prediction),
    "signed_residual": lambda prediction, label: label - prediction,
}


#: Scores that also read the event's ``scale`` (``(prediction, label, scale) -> score``).
SCALED_RESIDUALS: dict[str, Callable[[float, float, float], float]] = {
    "normalized_residual": lambda prediction, label, scale: abs(label - prediction) / scale,
}


def make_conditional_score(name: str) -> ConditionalScoreFn:
    """The conditional score called ``name`` as a function ``(prediction, label) -> scores``.

    ``name`` is ``abs_residual``, ``signed_residual`` (regression: ``prediction`` is ŷ) or
    ``one_minus_prob`` (classification: ``prediction`` is the probability vector or matrix,
    ``label`` the class index). The argument order is the same for all three, unlike the
    functions above, so that callers need not know which one they hold.

    Examples
    --------
    >>> make_conditional_score("abs_residual")([1.0], [3.0]).tolist()
    [2.0]
    >>> make_conditional_score("one_minus_prob")([0.2, 0.8], 1).round(2).tolist()
    0.2
    """
    if name in SCALED_RESIDUALS:
        raise ValueError(f"score {name!r} also needs the scale: use normalized_residual")
    if name not in CONDITIONAL_SCORES:
        raise ValueError(f"score must be one of {sorted(CONDITIONAL_SCORES)}, got {name!r}")
    return CONDITIONAL_SCORES[name]
