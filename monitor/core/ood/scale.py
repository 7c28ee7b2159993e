"""SCALE: activation scaling without pruning (Xu, Chen, Franchi & Yao, ICLR 2024)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.ood.base import FloatArray
from monitor.core.ood.shaping import PercentileShapedEnergy, sum_ratio, top_k_mask


class SCALE(PercentileShapedEnergy):
    """Energy after scaling all activations by exp(s1/s2), with no pruning.

    Xu et al. (2024), Sec. 4 (eq. for SCALE): r = s1/s2 where s1 is the sum of all of a sample's
    activations and s2 the sum of those above its ``percentile``-th percentile; the whole
    activation vector is multiplied by exp(r). Their analysis shows ASH's pruning hurts and its
    scaling helps, so SCALE keeps every activation. Needs no fitting.

    Parameters
    ----------
    W, b
        Last layer, shapes (C, D) and (C,).
    percentile
        Percentile p in [0, 100) defining s2 (the paper uses 85 on ImageNet).
    temperature
        Energy temperature.

    Examples
    --------
    >>> import numpy as np
    >>> SCALE(np.eye(2), np.zeros(2), percentile=50).shape(np.array([[1.0, 3.0]])).round(3)
    array([[ 3.794, 11.381]])

    References
    ----------
    Xu, Chen, Franchi, Yao. *Scaling for Training Time and Post-hoc Out-of-distribution Detection
    Enhancement.* ICLR 2024.
    """

    name = "scale"

    def __init__(
        self, W: ArrayLike, b: ArrayLike, percentile: float = 85.0, temperature: float = 1.0
    ) -> None:
        super().__init__(W, b, percentile, temperature)

    def shape(self, H: FloatArray) -> FloatArray:
        """``h · exp(s1/s2)`` per row."""
        return H * np.exp(sum_ratio(H, top_k_mask(H, self.percentile)))[:, None]
