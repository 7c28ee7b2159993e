"""aGRAPA betting: predictable plug-in bets on −log p, mixed over forgetting rates.

One bettor with forgetting rate β bets on g(p) = −log p − 1, which has mean 0 and variance 1
under p ~ Unif(0, 1) and g ≥ −1. Its factor is f(p) = 1 + λ g(p) with the aGRAPA plug-in bet
(Waudby-Smith & Ramdas 2024, Section 5.1, "approximate GRAPA"), one-sided and clipped,

    λ = min(max(m / s, 0), c),   m, s = discounted means of g and g² of the p-values before,

    m ← m + β (g − m),   s ← s + β (g² − s),   m_0 = 0, s_0 = 1 (the null moments),

m / s = μ / (σ² + μ²) being the maximiser of the second-order expansion of E log(1 + λ g). The
discount lets the bet re-adapt after a change. A mixture of K bettors keeps the fractions
π_k = S_k / Σ_j S_j like the Composite Jumper: F = Σ π_k f_k, then π_k ← π_k f_k / F.

State array (one argument of the compiled step): K forgetting rates, K means, K second moments,
K fractions, K scratch factors, then c and log S.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales.betting._array_state import ArrayStateBetting
from monitor.core.martingales.betting.base import P_FLOOR, check_p
from monitor.core.martingales.jit import compiled_entry, jit
from monitor.core.martingales.state import check_state, new_state

__all__ = ["AGrapaBetting"]

_FORGET, _MEAN, _SQUARE, _WEIGHT, _FACTOR, _BLOCKS = range(6)


@jit
def _agrapa_step(state: NDArray[np.float64], p: float) -> float:
    """One step of every bettor in ``state`` (updated in place); returns the new log S."""
    n = (state.size - 2) // _BLOCKS
    forget, mean, square = _FORGET * n, _MEAN * n, _SQUARE * n
    weight, factor = _WEIGHT * n, _FACTOR * n
    cap = state[-2]
    g = -math.log(max(p, P_FLOOR)) - 1.0
    total = 0.0
    for k in range(n):
        lam = min(max(state[mean + k] / state[square + k], 0.0), cap)
        state[factor + k] = 1.0 + lam * g
        total += state[weight + k] * state[factor + k]
    for k in range(n):
        state[weight + k] = state[weight + k] * state[factor + k] / total
        state[mean + k] += state[forget + k] * (g - state[mean + k])
        state[square + k] += state[forget + k] * (g * g - state[square + k])
    state[-1] += math.log(total)
    return state[-1]


@jit
def _agrapa_path(ps: NDArray[np.float64], state: NDArray[np.float64]) -> NDArray[np.float64]:
    """The log-capital path of :func:`_agrapa_step` over ``ps``."""
    out = np.empty(ps.size, np.float64)
    for t in range(ps.size):
        out[t] = _agrapa_step(state, ps[t])
    return out


@cache
def _agrapa_step_entry() -> Callable[[NDArray[np.float64], float], float]:
    """:func:`_agrapa_step` compiled once, called without numba's per-call type dispatch."""
    return compiled_entry(_agrapa_step, np.array([0.1, 0.0, 1.0, 1.0, 1.0, 0.5, 0.0]), 0.0)


class AGrapaBetting(ArrayStateBetting):
    """Plain average of one-sided aGRAPA bettors on −log p, one per forgetting rate.

    Each factor f(p) = 1 + λ(−log p − 1) has λ ∈ [0, c] fixed by the p-values before p
    (predictable) and ∫_0^1 (−log p − 1) dp = 0, so ∫_0^1 f(p) dp = 1 and f ≥ 1 − c > 0: each
    bettor is a test martingale (docs/algorithms.md, section 2), and so is their average. As
    S_n / S_i is then a test martingale from every i, the CUSUM and Shiryaev–Roberts rules on
    it stay e-detectors (Shin, Ramdas & Rinaldo 2023). Like the Simple Mixture it bets only on
    small p-values (scores worse than the reference).

    Parameters
    ----------
    forgets
        Forgetting rates β ∈ (0, 1) of the bettors' moment estimates: 1/β is roughly the
        number of recent p-values a bet is fitted to.
    max_bet
        The cap c ∈ (0, 1) on λ; each factor lies in [1 − c, ∞).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> bet = AGrapaBetting()
    >>> _ = bet.update_many(rng.uniform(size=300))
    >>> bool(bet.log_martingale < np.log(20))
    True
    >>> path = bet.update_many(rng.uniform(0, 0.2, size=60))
    >>> int((path >= np.log(20)).argmax())  # first step past Ville's 1/alpha = 20
    18

    References
    ----------
    Waudby-Smith, Ramdas. Estimating means of bounded random variables by betting. JRSSB 86
    (2024), Section 5.1 (aGRAPA). Shin, Ramdas, Rinaldo. E-detectors: a nonparametric framework
    for sequential change detection. NEJSDS (2023).
    """

    def __init__(self, forgets: Sequence[float] = (0.005, 0.02, 0.1), max_bet: float = 0.5
                 ) -> None:
        if len(forgets) == 0:
            raise ValueError("at least one forgetting rate is needed")
        for beta in forgets:
            if not 0.0 < float(beta) < 1.0:
                raise ValueError(f"forgetting rates must lie in (0, 1), got {beta!r}")
        if not 0.0 < float(max_bet) < 1.0:
            raise ValueError(f"max_bet must lie in (0, 1), got {max_bet!r}")
        self.forgets = forgets
        self.max_bet = max_bet
        self.reset()

    def reset(self) -> None:
        k = len(self.forgets)
        self._load([0.0] * k, [1.0] * k, [1.0 / k] * k, 0.0)

    def _load(self, mean: list[float], square: list[float], weight: list[float], log_s: float
              ) -> None:
        k = len(self.forgets)
        values = [*map(float, self.forgets), *mean, *square, *weight, *[1.0] * k,
                  float(self.max_bet), log_s]
        self._set_state(values, log_s)

    def _step_entry(self) -> Callable[[NDArray[np.float64], float], float]:
        return _agrapa_step_entry()

    def _path(self, ps: NDArray[np.float64]) -> NDArray[np.float64]:
        return _agrapa_path(ps, self._state)

    def _width(self) -> int:
        return len(self.forgets)

    def log_factor(self, p: float) -> float:
        g = -math.log(max(check_p(p), P_FLOOR)) - 1.0
        total = 0.0
        for m, s, w in zip(self._block(_MEAN), self._block(_SQUARE), self._block(_WEIGHT),
                           strict=True):
            total += w * (1.0 + min(max(m / s, 0.0), float(self.max_bet)) * g)
        return math.log(total)

    def state_dict(self) -> dict[str, Any]:
        params = {"forgets": [float(b) for b in self.forgets], "max_bet": float(self.max_bet)}
        return new_state(self, params=params, mean=self._block(_MEAN),
                         square=self._block(_SQUARE), weight=self._block(_WEIGHT),
                         log_s=self._log_s)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(**state["params"])
        obj._load([float(v) for v in state["mean"]], [float(v) for v in state["square"]],
                  [float(v) for v in state["weight"]], float(state["log_s"]))
        return obj
