"""Simple Jumper betting function (Vovk et al. 2021, "Retrain or not retrain", Algorithm 1)."""

from __future__ import annotations

from typing import Any

from monitor.core.martingales.betting._jumpers import JumperMixture

__all__ = ["SimpleJumper"]


class SimpleJumper(JumperMixture):
    """Bets ε ∈ {-1, 0, 1} on p - ½ and moves a fraction ``jump`` of its capital between bets.

    One-step factor (see ``_jumpers``): f(p) = 1 + (p - ½)(c'_+1 - c'_-1) ∈ [½, 3/2], which
    integrates to 1 over p ∈ [0, 1], so S_n is a test martingale (Vovk et al. 2021, Section 3).

    Parameters
    ----------
    jump
        Jump rate J ∈ [0, 1]: the share of capital redistributed evenly each step.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(7)
    >>> sj = SimpleJumper(jump=0.01)
    >>> path = sj.update_many(rng.uniform(size=200))          # exchangeable: no growth
    >>> bool(path.max() < np.log(20))
    True
    >>> path = sj.update_many(rng.uniform(0, 0.3, size=100))  # small p-values: a shift
    >>> bool(sj.log_martingale >= np.log(20))                 # Ville alarm at alpha = 0.05
    True

    References
    ----------
    Vovk, Petej, Nouretdinov, Ahlberg, Carlsson, Gammerman. Retrain or not retrain: conformal
    test martingales for change-point detection. COPA 2021, Algorithm 1.
    """

    def __init__(self, jump: float = 0.01) -> None:
        self.jump = jump
        super().__init__((jump,))

    def _params(self) -> dict[str, Any]:
        return {"jump": self.jump}
