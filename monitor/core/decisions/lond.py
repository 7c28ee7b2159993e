"""LOND: online FDR control with levels that grow with the number of discoveries.

Javanmard & Montanari (2018), Sec. 3: test t is rejected when p_t <= alpha_t with
alpha_t = alpha · gamma_t · (D(t−1) + 1), D(t−1) the number of rejections among the first t−1
tests and gamma a non-negative sequence with Σ_t gamma_t <= 1. LOND controls the FDR at every
time under independence (their Theorem 3.1) and under PRDS p-values (Zrnic, Ramdas & Jordan 2021,
Theorem 3); Ma, Zou & Liu (ICML 2025, g-LOND) apply it to conformal OOD p-values against a fixed
calibration set, which are PRDS (Bates et al. 2023).
"""

from __future__ import annotations

import math
from functools import lru_cache

from monitor.core.decisions.base import check_alpha

#: Normalising constant of the Javanmard–Montanari sequence (2018, Sec. 7), as in the onlineFDR
#: R package; with it Σ_j gamma_j ≈ 0.98 <= 1 (tests check partial sums).
_JM_CONSTANT = 0.07720838


def gamma(t: int, horizon: int | None = None) -> float:
    """gamma_t (t >= 1): 1/(t·H_N) up to a horizon N, else Javanmard & Montanari's sequence.

    With a horizon N (H_N = Σ_{j<=N} 1/j), gamma_t = 1/(t·H_N) for t <= N and 0 after: the sum
    is exactly 1 over a window of N events. Without one, the infinite sequence
    gamma_t = 0.0772·log(max(t, 2)) / (t·exp(sqrt(log t))) (Javanmard & Montanari 2018).

    Examples
    --------
    >>> round(sum(gamma(t, horizon=256) for t in range(1, 257)), 12)
    1.0
    """
    if t < 1:
        raise ValueError(f"t counts tests from 1, got {t}")
    if horizon is not None:
        if t > horizon:
            return 0.0
        return 1.0 / (t * _harmonic(horizon))
    return _JM_CONSTANT * math.log(max(t, 2)) / (t * math.exp(math.sqrt(math.log(t))))


@lru_cache(maxsize=64)
def _harmonic(n: int) -> float:
    return math.fsum(1.0 / j for j in range(1, n + 1))


class LOND:
    """Online LOND decisions, one p-value at a time.

    Parameters
    ----------
    alpha
        Target FDR in (0, 1).
    horizon
        If set, gamma_t = 1/(t·H_N) over N = ``horizon`` tests (the stream decider restarts LOND
        every window of N events, so the guarantee is per window like g-BH's); tests beyond the
        horizon get level 0. ``None``: Javanmard & Montanari's infinite sequence.

    Examples
    --------
    >>> lond = LOND(alpha=0.1, horizon=100)
    >>> for p in [0.5, 0.001, 0.004, 0.9]:
    ...     lond.update(p)
    >>> lond.n_rejected, lond.rejected, round(lond.level, 5)
    (2, False, 0.01446)
    """

    name = "lond"

    def __init__(self, alpha: float = 0.1, horizon: int | None = None) -> None:
        check_alpha(alpha)
        if horizon is not None and (isinstance(horizon, bool) or horizon < 1):
            raise ValueError(f"horizon must be None or an integer >= 1, got {horizon!r}")
        self.alpha = alpha
        self.horizon = horizon
        self._t = 0
        self._discoveries = 0
        self._rejected = False
        self._level = 0.0

    def update(self, p: float) -> None:
        """Test the next hypothesis with p-value ``p``."""
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be a p-value in [0, 1], got {p!r}")
        self._level = self.next_level
        self._t += 1
        self._rejected = p <= self._level
        self._discoveries += int(self._rejected)

    @property
    def next_level(self) -> float:
        """alpha·gamma_{t+1}·(D(t) + 1): the level the next p-value will be compared with."""
        return self.alpha * gamma(self._t + 1, self.horizon) * (self._discoveries + 1)

    @property
    def rejected(self) -> bool:
        """Whether the last p-value was rejected (flagged OOD)."""
        return self._rejected

    @property
    def level(self) -> float:
        """The level alpha_t the last p-value was compared with (0 before any update)."""
        return self._level

    @property
    def n_tested(self) -> int:
        """Number of p-values seen, t."""
        return self._t

    @property
    def n_rejected(self) -> int:
        """Number of rejections so far, D(t)."""
        return self._discoveries

    def state_dict(self) -> dict[str, float | int | bool | None]:
        """JSON-ready state (restore with :meth:`from_state`)."""
        return {
            "alpha": self.alpha,
            "horizon": self.horizon,
            "t": self._t,
            "discoveries": self._discoveries,
            "rejected": self._rejected,
            "level": self._level,
        }

    @classmethod
    def from_state(cls, state: dict[str, float | int | bool | None]) -> LOND:
        """Inverse of :meth:`state_dict`."""
        horizon = state["horizon"]
        lond = cls(float(state["alpha"] or 0.0), None if horizon is None else int(horizon))
        lond._t = int(state["t"] or 0)
        lond._discoveries = int(state["discoveries"] or 0)
        lond._rejected = bool(state["rejected"])
        lond._level = float(state["level"] or 0.0)
        return lond
