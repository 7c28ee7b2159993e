"""Composite Jumper: the plain average of Simple Jumpers over several jump rates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from monitor.core.martingales.betting._jumpers import JumperMixture

__all__ = ["CompositeJumper"]


class CompositeJumper(JumperMixture):
    """S_n = (1/K) Σ_k S_n^{(J_k)}, each Simple Jumper redistributing only its own capital.

    An average of test martingales is a test martingale (Vovk et al. 2021, Section 3). The
    WATCH reference code instead redistributes the *averaged* capital inside every jumper, which
    is not the average of Simple Jumpers (docs/algorithms.md, "Departures").

    Parameters
    ----------
    jumps
        Jump rates, each in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(3)
    >>> cj = CompositeJumper()
    >>> _ = cj.update_many(rng.uniform(size=300))
    >>> bool(cj.log_martingale < np.log(20))
    True
    >>> path = cj.update_many(rng.uniform(0, 0.2, size=60))
    >>> int((path >= np.log(20)).argmax())  # first step past Ville's 1/alpha = 20
    27

    References
    ----------
    Vovk et al. Retrain or not retrain: conformal test martingales for change-point detection.
    COPA 2021, Section 3 (Composite Jumper).
    """

    def __init__(self, jumps: Sequence[float] = (1e-4, 1e-3, 1e-2, 0.1, 1.0)) -> None:
        self.jumps = jumps
        super().__init__(tuple(float(j) for j in jumps))

    def _params(self) -> dict[str, Any]:
        return {"jumps": [float(j) for j in self.jumps]}
