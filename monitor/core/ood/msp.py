"""Maximum softmax probability (Hendrycks & Gimpel, ICLR 2017)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.ood._logits import log_probs, logit_matrix
from monitor.core.ood.base import FloatArray, Scorer


class MSP(Scorer):
    """Maximum softmax probability ``max_c softmax(z)_c``, in [1/C, 1].

    Hendrycks & Gimpel (2017), Sec. 2: the baseline score is the largest class probability.
    Needs no fitting.

    Examples
    --------
    >>> import numpy as np
    >>> MSP().score(np.array([[4.0, 0.0, 0.0], [0.0, 0.0, 0.0]])).round(3)
    array([0.965, 0.333])

    References
    ----------
    Hendrycks, Gimpel. *A Baseline for Detecting Misclassified and Out-of-Distribution Examples
    in Neural Networks.* ICLR 2017.
    """

    name = "msp"
    input = "logits"

    def __init__(self) -> None:
        pass

    def score(self, X: ArrayLike) -> FloatArray:
        """Largest softmax probability of each row of logits."""
        return np.exp(log_probs(logit_matrix(X)).max(axis=1))
