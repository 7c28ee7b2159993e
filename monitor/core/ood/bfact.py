"""BFAct: Butterworth-filter rectified activations (Kong & Li, 2022)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.ood.base import FloatArray, check_percentile
from monitor.core.ood.shaping import ShapedEnergy


class BFAct(ShapedEnergy):
    """Energy after a Butterworth low-pass on activations: ``h / sqrt(1 + (|h|/c)^(2N))``.

    Kong & Li (2022), Sec. 3: activations pass through the gain 1/sqrt(1 + (h/c)^(2N)) of an
    order-N Butterworth low-pass filter with cut-off c, a smooth rectification in the spirit of
    ReAct: identity well below c, ≈ c for N = 1 far above it, and for N > 1 activations far
    above c are damped towards 0 (as c^N / h^(N−1)). As in ReAct, c is the ``percentile``-th
    percentile of the pooled calibration activations.

    Parameters
    ----------
    W, b
        Last layer, shapes (C, D) and (C,).
    percentile
        Percentile of calibration activations used as the cut-off c, in [0, 100).
    order
        Filter order N >= 1.
    temperature
        Energy temperature.

    Examples
    --------
    >>> import numpy as np
    >>> bf = BFAct(np.eye(2), np.zeros(2), order=2).fit(np.array([[1.0, 1.0], [1.0, 1.0]]))
    >>> bf.shape(np.array([[0.1, 10.0]])).round(3)  # c = 1
    array([[0.1, 0.1]])

    References
    ----------
    Kong, Li. *BFAct: Out-of-Distribution Detection with Butterworth Filter Rectified
    Activations.* Cognitive Systems and Information Processing (ICCSIP) 2022.
    """

    name = "bfact"
    _fitted = ("threshold_",)

    def __init__(
        self,
        W: ArrayLike,
        b: ArrayLike,
        percentile: float = 90.0,
        order: int = 2,
        temperature: float = 1.0,
    ) -> None:
        super().__init__(W, b, temperature)
        check_percentile("percentile", percentile)
        if isinstance(order, bool) or not isinstance(order, int | np.integer) or order < 1:
            raise ValueError(f"order must be an integer >= 1, got {order!r}")
        self.percentile = percentile
        self.order = order

    def _fit_shaping(self, H: FloatArray) -> None:
        # A zero cut-off (mostly inactive units) would divide by zero: fall back to the largest
        # calibration activation, i.e. almost no filtering.
        c = float(np.percentile(H, self.percentile))
        self.threshold_ = c if c > 0 else max(float(np.abs(H).max()), 1e-12)

    def shape(self, H: FloatArray) -> FloatArray:
        """``h / sqrt(1 + (|h|/c)^(2N))`` element-wise."""
        ratio = np.abs(H) / self.threshold_
        # (|h|/c)^(2N) overflows for huge |h|; log-space keeps the gain finite (it tends to 0).
        log_gain = -0.5 * np.logaddexp(0.0, 2 * self.order * np.log(np.maximum(ratio, 1e-300)))
        return H * np.exp(log_gain)
