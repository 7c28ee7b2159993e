"""Negative predictive entropy of the softmax."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.ood._logits import log_probs, logit_matrix
from monitor.core.ood.base import FloatArray, Scorer


class NegativeEntropy(Scorer):
    """Negative Shannon entropy of the softmax, ``Σ_c p_c log p_c``, in [−log C, 0].

    The entropy of the predictive distribution as an OOD score (e.g. Hendrycks, Mazeika &
    Dietterich, ICLR 2019, Sec. 4, and the baselines of Liu et al. 2020); negated so that
    higher = more in-distribution (confident). Needs no fitting.

    Examples
    --------
    >>> import numpy as np
    >>> NegativeEntropy().score(np.array([[0.0, 0.0], [20.0, 0.0]])).round(4)
    array([-0.6931, -0.    ])

    References
    ----------
    Hendrycks, Mazeika, Dietterich. *Deep Anomaly Detection with Outlier Exposure.* ICLR 2019.
    """

    name = "entropy"
    input = "logits"

    def __init__(self) -> None:
        pass

    def score(self, X: ArrayLike) -> FloatArray:
        """``Σ_c p_c log p_c`` of each row of logits (0·log 0 = 0)."""
        logp = log_probs(logit_matrix(X))
        return np.sum(np.exp(logp) * logp, axis=1)
