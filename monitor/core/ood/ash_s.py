"""ASH-S: prune and scale activations (Djurisic, Bozanic, Ashok & Liu, ICLR 2023)."""

from __future__ import annotations

import numpy as np

from monitor.core.ood.base import FloatArray
from monitor.core.ood.shaping import PercentileShapedEnergy, sum_ratio, top_k_mask


class ASHS(PercentileShapedEnergy):
    """Energy after ASH-S: keep each sample's top activations and scale them by exp(s1/s2).

    Djurisic et al. (2023), Sec. 3 (ASH-S): zero every activation below the sample's
    ``percentile``-th percentile, then multiply the kept ones by exp(s1/s2) where s1 and s2 are
    the sample's activation sums before and after pruning. Needs no fitting.

    Parameters
    ----------
    W, b
        Last layer, shapes (C, D) and (C,).
    percentile
        Pruning percentile p in [0, 100): the top (100 − p)% activations are kept.
    temperature
        Energy temperature.

    Examples
    --------
    >>> import numpy as np
    >>> scorer = ASHS(np.eye(2), np.zeros(2), percentile=50)
    >>> scorer.shape(np.array([[1.0, 3.0]])).round(3)  # s1/s2 = 4/3
    array([[ 0.   , 11.381]])

    References
    ----------
    Djurisic, Bozanic, Ashok, Liu. *Extremely Simple Activation Shaping for Out-of-Distribution
    Detection.* ICLR 2023.
    """

    name = "ash_s"

    def shape(self, H: FloatArray) -> FloatArray:
        """Pruned activations scaled by exp(s1/s2) per row."""
        mask = top_k_mask(H, self.percentile)
        return np.where(mask, H, 0.0) * np.exp(sum_ratio(H, mask))[:, None]
