"""ASH-B: prune and binarize activations (Djurisic, Bozanic, Ashok & Liu, ICLR 2023)."""

from __future__ import annotations

import numpy as np

from monitor.core.ood.base import FloatArray
from monitor.core.ood.shaping import PercentileShapedEnergy, top_k_mask


class ASHB(PercentileShapedEnergy):
    """Energy after ASH-B: keep each sample's top K activations and set them all to s1/K.

    Djurisic et al. (2023), Sec. 3 (ASH-B): after pruning below the sample's ``percentile``-th
    percentile, every kept activation is replaced by the constant s1/K (s1 the sum before
    pruning, K the number kept), so the total mass is preserved. Needs no fitting.

    Parameters
    ----------
    W, b
        Last layer, shapes (C, D) and (C,).
    percentile
        Pruning percentile p in [0, 100).
    temperature
        Energy temperature.

    Examples
    --------
    >>> import numpy as np
    >>> ASHB(np.eye(4), np.zeros(4), percentile=50).shape(np.array([[1.0, 3.0, 0.0, 4.0]]))
    array([[0., 4., 0., 4.]])

    References
    ----------
    Djurisic, Bozanic, Ashok, Liu. *Extremely Simple Activation Shaping for Out-of-Distribution
    Detection.* ICLR 2023.
    """

    name = "ash_b"

    def shape(self, H: FloatArray) -> FloatArray:
        """Kept activations replaced by s1/K per row, the others by 0."""
        mask = top_k_mask(H, self.percentile)
        level = H.sum(axis=1) / mask.sum(axis=1)
        return np.where(mask, level[:, None], 0.0)
