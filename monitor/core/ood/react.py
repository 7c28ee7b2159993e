"""ReAct: rectified activations (Sun, Guo & Li, NeurIPS 2021)."""

from __future__ import annotations

import numpy as np

from monitor.core.ood.base import FloatArray
from monitor.core.ood.shaping import PercentileShapedEnergy


class ReAct(PercentileShapedEnergy):
    """Energy after clipping activations at a calibration percentile: ``h̄ = min(h, c)``.

    Sun et al. (2021), eq. (1)–(2): c is the ``percentile``-th percentile of all calibration
    activations (pooled over units; the paper uses the 90th), then the energy score of
    W·h̄ + b.

    Parameters
    ----------
    W, b
        Last layer, shapes (C, D) and (C,).
    percentile
        Percentile of calibration activations used as the clipping threshold, in [0, 100).
    temperature
        Energy temperature.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> W, b = rng.normal(size=(3, 16)), np.zeros(3)
    >>> react = ReAct(W, b).fit(np.maximum(rng.normal(size=(200, 16)), 0.0))
    >>> spike = np.zeros((1, 16)); spike[0, 0] = 100.0
    >>> bool(react.score(spike)[0] < react.energy(spike)[0])  # the clip removes the spike's energy
    True

    References
    ----------
    Sun, Guo, Li. *ReAct: Out-of-distribution Detection With Rectified Activations.* NeurIPS 2021.
    """

    name = "react"
    _fitted = ("threshold_",)

    def _fit_shaping(self, H: FloatArray) -> None:
        self.threshold_ = float(np.percentile(H, self.percentile))

    def shape(self, H: FloatArray) -> FloatArray:
        """``min(h, c)`` element-wise."""
        return np.minimum(H, self.threshold_)
