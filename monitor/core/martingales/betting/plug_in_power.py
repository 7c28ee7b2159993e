"""Plug-in power betting: the power martingale with a predictable, re-fitted exponent.

The power factor ε p^(ε−1) (ALRW eq. (9.8)) is the likelihood ratio of Beta(ε, 1) p-values
against uniform ones; its maximum-likelihood exponent on p-values p_1..p_n is
ε̂ = 1 / mean(−log p_i). One bettor with forgetting rate β bets, at each step, with the
exponent fitted to the p-values *before* it (a predictable plug-in, Shekhar & Ramdas 2023),

    ε = min(max(1 / m, ε_min), 1),   m ← m + β (−log p − m),   m_0 = 1 (the null mean),

so it bets nothing (ε = 1) while p-values look uniform, and re-fits within about 1/β events
after a change. A mixture of K bettors keeps the fractions π_k = S_k / Σ_j S_j like the
Composite Jumper: F = Σ π_k f_k, then π_k ← π_k f_k / F.

State array (one argument of the compiled step): K forgetting rates, K means, K fractions,
K scratch factors, then ε_min and log S.
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

__all__ = ["PlugInPower"]

_FORGET, _MEAN, _WEIGHT, _FACTOR, _BLOCKS = range(5)


@jit
def _exponent(mean: float, floor: float) -> float:
    """min(max(1 / mean, floor), 1) without dividing by a mean of 0 (p-values all 1)."""
    return 1.0 if mean <= 1.0 else max(1.0 / mean, floor)


@jit
def _plug_in_step(state: NDArray[np.float64], p: float) -> float:
    """One step of every bettor in ``state`` (updated in place); returns the new log S."""
    n = (state.size - 2) // _BLOCKS
    forget, mean, weight, factor = _FORGET * n, _MEAN * n, _WEIGHT * n, _FACTOR * n
    floor = state[-2]
    v = -math.log(max(p, P_FLOOR))
    total = 0.0
    for k in range(n):
        eps = _exponent(state[mean + k], floor)
        state[factor + k] = eps * math.exp((1.0 - eps) * v)
        total += state[weight + k] * state[factor + k]
    for k in range(n):
        state[weight + k] = state[weight + k] * state[factor + k] / total
        state[mean + k] += state[forget + k] * (v - state[mean + k])
    state[-1] += math.log(total)
    return state[-1]


@jit
def _plug_in_path(ps: NDArray[np.float64], state: NDArray[np.float64]) -> NDArray[np.float64]:
    """The log-capital path of :func:`_plug_in_step` over ``ps``."""
    out = np.empty(ps.size, np.float64)
    for t in range(ps.size):
        out[t] = _plug_in_step(state, ps[t])
    return out


@cache
def _plug_in_step_entry() -> Callable[[NDArray[np.float64], float], float]:
    """:func:`_plug_in_step` compiled once, called without numba's per-call type dispatch."""
    return compiled_entry(_plug_in_step, np.array([0.1, 1.0, 1.0, 1.0, 0.05, 0.0]), 0.0)


class PlugInPower(ArrayStateBetting):
    """Plain average of power bettors whose exponents are re-fitted to the recent p-values.

    Each factor f(p) = ε p^(ε−1) has ε ∈ [ε_min, 1] fixed by the p-values before p
    (predictable) and ∫_0^1 ε p^(ε−1) dp = 1, so each bettor is a test martingale
    (docs/algorithms.md, section 2), and so is their average. Since S_n / S_i is then a test
    martingale from every i, the CUSUM and Shiryaev–Roberts rules on it remain e-detectors
    (Shin, Ramdas & Rinaldo 2023). It bets only on small p-values (scores worse than the
    reference), like the Simple Mixture, but its bet follows the evidence of the last ~1/β
    events instead of the whole history, so it re-adapts after a long quiet stretch.

    Parameters
    ----------
    forgets
        Forgetting rates β ∈ (0, 1] of the bettors' mean of −log p: 1/β is roughly the number
        of recent p-values an exponent is fitted to.
    min_epsilon
        The smallest exponent ε_min ∈ (0, 1) a bettor may use (the hardest bet on small p).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> bet = PlugInPower()
    >>> _ = bet.update_many(rng.uniform(size=300))
    >>> bool(bet.log_martingale < np.log(20))
    True
    >>> path = bet.update_many(rng.uniform(0, 0.2, size=60))
    >>> int((path >= np.log(20)).argmax())  # first step past Ville's 1/alpha = 20
    20

    References
    ----------
    Vovk, Gammerman, Shafer. Algorithmic Learning in a Random World, 2nd ed., eq. (9.8).
    Shekhar, Ramdas. Reducing sequential change detection to sequential estimation (2023),
    Section 3 (predictable plug-in). Shin, Ramdas, Rinaldo. E-detectors: a nonparametric
    framework for sequential change detection. NEJSDS (2023).
    """

    def __init__(self, forgets: Sequence[float] = (0.02, 0.1, 0.3), min_epsilon: float = 0.05
                 ) -> None:
        if len(forgets) == 0:
            raise ValueError("at least one forgetting rate is needed")
        for beta in forgets:
            if not 0.0 < float(beta) <= 1.0:
                raise ValueError(f"forgetting rates must lie in (0, 1], got {beta!r}")
        if not 0.0 < float(min_epsilon) < 1.0:
            raise ValueError(f"min_epsilon must lie in (0, 1), got {min_epsilon!r}")
        self.forgets = forgets
        self.min_epsilon = min_epsilon
        self.reset()

    def reset(self) -> None:
        k = len(self.forgets)
        self._load([1.0] * k, [1.0 / k] * k, 0.0)

    def _load(self, mean: list[float], weight: list[float], log_s: float) -> None:
        k = len(self.forgets)
        values = [*map(float, self.forgets), *mean, *weight, *[1.0] * k,
                  float(self.min_epsilon), log_s]
        self._set_state(values, log_s)

    def _step_entry(self) -> Callable[[NDArray[np.float64], float], float]:
        return _plug_in_step_entry()

    def _path(self, ps: NDArray[np.float64]) -> NDArray[np.float64]:
        return _plug_in_path(ps, self._state)

    def _width(self) -> int:
        return len(self.forgets)

    def log_factor(self, p: float) -> float:
        v = -math.log(max(check_p(p), P_FLOOR))
        total = 0.0
        for m, w in zip(self._block(_MEAN), self._block(_WEIGHT), strict=True):
            eps = _exponent(m, float(self.min_epsilon))
            total += w * eps * math.exp((1.0 - eps) * v)
        return math.log(total)

    def state_dict(self) -> dict[str, Any]:
        params = {"forgets": [float(b) for b in self.forgets],
                  "min_epsilon": float(self.min_epsilon)}
        return new_state(self, params=params, mean=self._block(_MEAN),
                         weight=self._block(_WEIGHT), log_s=self._log_s)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(**state["params"])
        obj._load([float(v) for v in state["mean"]], [float(v) for v in state["weight"]],
                  float(state["log_s"]))
        return obj
