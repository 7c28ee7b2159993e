"""Shared arithmetic of the Simple and Composite Jumpers (Vovk et al. 2021, Algorithm 1).

A Simple Jumper with jump rate J holds capital on three bets ε ∈ {-1, 0, 1}. Each step it first
redistributes a fraction J of its own total capital evenly, C_ε ← (1-J)·C_ε + (J/3)·C, then
bets C_ε ← C_ε·(1 + ε(p - ½)). We keep the fractions c_ε = C_ε / C (c_0 = 1 - c_-1 - c_+1) and
log C, so one step is

    c'_ε = (1-J)·c_ε + J/3,   f = 1 + (p - ½)(c'_+1 - c'_-1),   c_ε ← c'_ε(1 + ε(p - ½)) / f,

and log S += log f. A mixture of K jumpers keeps the fractions π_k = S_k / Σ_j S_j, and the
factor of the average (1/K)Σ S_k is F = Σ π_k f_k, after which π_k ← π_k f_k / F. Each jumper
redistributes only its own capital, so the average is a martingale (E f_k = 1 ⇒ E F = 1).
"""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.martingales._jit import jit
from monitor.martingales._state import check_state, new_state
from monitor.martingales.betting.base import BettingFunction, check_p, check_ps


def check_jump(jump: float) -> float:
    if not 0.0 <= float(jump) <= 1.0:
        raise ValueError(f"jump rates must lie in [0, 1], got {jump!r}")
    return float(jump)


@jit
def _jumpers_path(
    ps: NDArray[np.float64],
    keep: NDArray[np.float64],
    share: NDArray[np.float64],
    down: NDArray[np.float64],
    up: NDArray[np.float64],
    weight: NDArray[np.float64],
    log_s: float,
) -> NDArray[np.float64]:
    """The log-capital path; ``down``, ``up``, ``weight`` are updated in place."""
    n_jumpers = keep.size
    factor = np.empty(n_jumpers, np.float64)
    out = np.empty(ps.size, np.float64)
    for t in range(ps.size):
        d = ps[t] - 0.5
        total = 0.0
        for k in range(n_jumpers):
            down[k] = keep[k] * down[k] + share[k]
            up[k] = keep[k] * up[k] + share[k]
            factor[k] = 1.0 + d * (up[k] - down[k])
            total += weight[k] * factor[k]
        for k in range(n_jumpers):
            weight[k] = weight[k] * factor[k] / total
            down[k] = down[k] * (1.0 - d) / factor[k]
            up[k] = up[k] * (1.0 + d) / factor[k]
        log_s += math.log(total)
        out[t] = log_s
    return out


class JumperMixture(BettingFunction):
    """Plain average of independent Simple Jumpers with the given jump rates."""

    def __init__(self, jumps: tuple[float, ...]) -> None:
        if len(jumps) == 0:
            raise ValueError("at least one jump rate is needed")
        self._keep = [1.0 - check_jump(j) for j in jumps]
        self._share = [check_jump(j) / 3.0 for j in jumps]
        self.reset()

    def reset(self) -> None:
        k = len(self._keep)
        self._down = [1.0 / 3.0] * k
        self._up = [1.0 / 3.0] * k
        self._weight = [1.0 / k] * k
        self._factor = [1.0] * k  # scratch space of update()
        self._log_s = 0.0

    def update(self, p: float) -> None:
        # Same operations in the same order as _jumpers_path (bit-identical paths).
        d = check_p(p) - 0.5
        keep, share, down, up, weight = self._keep, self._share, self._down, self._up, self._weight
        factor = self._factor
        total = 0.0
        for k in range(len(keep)):
            down[k] = keep[k] * down[k] + share[k]
            up[k] = keep[k] * up[k] + share[k]
            factor[k] = 1.0 + d * (up[k] - down[k])
            total += weight[k] * factor[k]
        for k in range(len(keep)):
            weight[k] = weight[k] * factor[k] / total
            down[k] = down[k] * (1.0 - d) / factor[k]
            up[k] = up[k] * (1.0 + d) / factor[k]
        self._log_s += math.log(total)

    def log_factor(self, p: float) -> float:
        d = check_p(p) - 0.5
        total = 0.0
        for kp, sh, c_down, c_up, w in zip(
            self._keep, self._share, self._down, self._up, self._weight, strict=True
        ):
            total += w * (1.0 + d * ((kp * c_up + sh) - (kp * c_down + sh)))
        return math.log(total)

    def update_many(self, ps: ArrayLike) -> NDArray[np.float64]:
        arr = check_ps(ps)
        down, up, weight = (np.array(v, np.float64) for v in (self._down, self._up, self._weight))
        keep, share = np.array(self._keep), np.array(self._share)
        out = _jumpers_path(arr, keep, share, down, up, weight, self._log_s)
        self._down, self._up, self._weight = down.tolist(), up.tolist(), weight.tolist()
        if out.size:
            self._log_s = float(out[-1])
        return out

    def _jumper_state(self) -> dict[str, Any]:
        return {"down": list(self._down), "up": list(self._up), "weight": list(self._weight),
                "log_s": self._log_s}

    def _load_jumper_state(self, state: dict[str, Any]) -> None:
        self._down = [float(v) for v in state["down"]]
        self._up = [float(v) for v in state["up"]]
        self._weight = [float(v) for v in state["weight"]]
        self._log_s = float(state["log_s"])

    def state_dict(self) -> dict[str, Any]:
        return new_state(self, params=self._params(), **self._jumper_state())

    def _params(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(**state["params"])
        obj._load_jumper_state(state)
        return obj
