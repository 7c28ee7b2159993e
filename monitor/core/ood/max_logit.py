"""Maximum logit (Hendrycks, Basart, Mazeika et al., ICML 2022)."""

from __future__ import annotations

from numpy.typing import ArrayLike

from monitor.core.ood._logits import logit_matrix
from monitor.core.ood.base import FloatArray, Scorer


class MaxLogit(Scorer):
    """Largest unnormalised logit ``max_c z_c``; the T → 0 limit of the energy score.

    Hendrycks et al. (2022), Sec. 4 ("MaxLogit"). Needs no fitting.

    Examples
    --------
    >>> import numpy as np
    >>> MaxLogit().score(np.array([[4.0, 0.0, -1.0], [0.5, 0.2, 0.1]]))
    array([4. , 0.5])

    References
    ----------
    Hendrycks, Basart, Mazeika, Zou, Kwon, Mostajabi, Steinhardt, Song. *Scaling
    Out-of-Distribution Detection for Real-World Settings.* ICML 2022.
    """

    name = "max_logit"
    input = "logits"

    def __init__(self) -> None:
        pass

    def score(self, X: ArrayLike) -> FloatArray:
        """Largest logit of each row."""
        return logit_matrix(X).max(axis=1)
