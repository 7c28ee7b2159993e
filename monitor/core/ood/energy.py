"""Negative free energy of the logits (Liu, Wang, Owens & Li, NeurIPS 2020)."""

from __future__ import annotations

from numpy.typing import ArrayLike

from monitor.core.ood._logits import logit_matrix, row_logsumexp
from monitor.core.ood.base import FloatArray, Scorer, check_positive


class Energy(Scorer):
    """Negative energy ``−E(x; T) = T · log Σ_c exp(z_c / T)``.

    Liu et al. (2020), eq. (5) defines E(x; f) = −T·log Σ_i e^{f_i(x)/T}; the score is −E so that
    higher = more in-distribution. As T → 0 it tends to the max logit; it exceeds the max logit
    by at most T·log C. Needs no fitting.

    Parameters
    ----------
    temperature
        T > 0 (the paper uses T = 1).

    Examples
    --------
    >>> import numpy as np
    >>> Energy().score(np.array([[0.0, 0.0], [5.0, -5.0]])).round(4)
    array([0.6931, 5.    ])

    References
    ----------
    Liu, Wang, Owens, Li. *Energy-based Out-of-distribution Detection.* NeurIPS 2020.
    """

    name = "energy"
    input = "logits"

    def __init__(self, temperature: float = 1.0) -> None:
        check_positive("temperature", temperature)
        self.temperature = temperature

    def score(self, X: ArrayLike) -> FloatArray:
        """``T · logsumexp(z / T)`` of each row of logits."""
        logits = logit_matrix(X)
        return self.temperature * row_logsumexp(logits / self.temperature)
