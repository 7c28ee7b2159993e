"""Numerically stable softmax pieces shared by the logit-based scorers."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_softmax, logsumexp

from monitor.core.ood.base import FloatArray, as_matrix


def logit_matrix(X: ArrayLike) -> FloatArray:
    """Logits as a float64 matrix ``(n, C)`` with at least two classes."""
    logits = as_matrix(X, "logits")
    if logits.shape[1] < 2:
        raise ValueError(f"logits need at least 2 classes (columns), got {logits.shape[1]}")
    return logits


def log_probs(logits: FloatArray) -> FloatArray:
    """log softmax(z) row-wise, stable for large logits."""
    return np.asarray(log_softmax(logits, axis=1), dtype=np.float64)


def row_logsumexp(values: FloatArray) -> FloatArray:
    """log Σ_j exp(v_ij) row-wise, stable for large values."""
    return np.asarray(logsumexp(values, axis=1), dtype=np.float64)
