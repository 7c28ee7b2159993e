"""What the batch decision rules return, and the checks they share."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """Rejections of one batch: ``rejected[i]`` flags test point i as OOD.

    ``threshold`` is the step-up threshold on the p-value scale: BH rejects p <= threshold
    (= alpha·R/n, 0 when nothing is rejected); e-BH rejects 1/e <= threshold (same formula).
    """

    rejected: BoolArray
    threshold: float

    @property
    def n_rejected(self) -> int:
        """Number of rejections R."""
        return int(self.rejected.sum())


def check_alpha(alpha: float) -> None:
    """Raise unless 0 < alpha < 1."""
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")


def as_p_values(p: ArrayLike, name: str = "p") -> FloatArray:
    """``p`` as a float64 vector of numbers in [0, 1]."""
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d array of p-values, got shape {arr.shape}")
    if not (np.isfinite(arr).all() and (arr >= 0).all() and (arr <= 1).all()):
        raise ValueError(f"{name} must hold p-values in [0, 1]")
    return arr
