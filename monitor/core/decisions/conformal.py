"""Conformal (empirical) p-values of test scores against calibration scores."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.decisions.base import FloatArray


def conformal_p_values(test_scores: ArrayLike, calibration_scores: ArrayLike) -> FloatArray:
    """p_i = (1 + #{j : s_cal_j <= s_test_i}) / (m + 1), with higher score = more in-distribution.

    The conformal p-value for "test point i is in-distribution" (Bates et al. 2023, eq. (3),
    with the sign flipped to our convention; Ma, Zou & Liu 2024, eq. (4)): small when the test
    score is lower than most calibration scores. If the m calibration scores and a null test
    score are exchangeable, P(p <= u) <= u for every u, and the p-values of several test points
    against one calibration set are PRDS (Bates et al. 2023, Theorem 2), which is what BH needs.
    Vectorised with one sort and ``searchsorted``: O((m + n) log m).

    Examples
    --------
    >>> conformal_p_values([-5.0, 0.5, 9.0], [0.0, 1.0, 2.0, 3.0])
    array([0.2, 0.4, 1. ])
    """
    cal = np.sort(np.asarray(calibration_scores, dtype=np.float64).ravel())
    test = np.asarray(test_scores, dtype=np.float64)
    if cal.size == 0:
        raise ValueError("calibration_scores must not be empty")
    if np.isnan(cal).any() or np.isnan(test).any():
        raise ValueError("scores must not be NaN")
    return p_values_from_sorted(test, cal)


def p_values_from_sorted(test_scores: FloatArray, sorted_calibration: FloatArray) -> FloatArray:
    """:func:`conformal_p_values` with calibration scores already sorted ascending (no checks)."""
    below_or_equal = np.searchsorted(sorted_calibration, test_scores, side="right")
    return np.asarray((1.0 + below_or_equal) / (sorted_calibration.size + 1.0), dtype=np.float64)
