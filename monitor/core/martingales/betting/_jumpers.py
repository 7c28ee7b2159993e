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
from collections.abc import Callable
from functools import cache
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales.betting._array_state import ArrayStateBetting
from monitor.core.martingales.betting.base import check_p
from monitor.core.martingales.jit import compiled_entry, jit
from monitor.core.martingales.state import check_state, new_state


def check_jump(jump: float) -> float:
    if not 0.0 <= float(jump) <= 1.0:
        raise ValueError(f"jump rates must lie in [0, 1], got {jump!r}")
    return float(jump)


#: Layout of a mixture's state array, K values per block, then log S: one array is one
#: argument of the compiled step (each argument costs ~100 ns of unboxing per call).
_KEEP, _SHARE, _DOWN, _UP, _WEIGHT, _FACTOR, _BLOCKS = range(7)


@jit
def _jumpers_step(state: NDArray[np.float64], p: float) -> float:
    """One step of every jumper in ``state`` (updated in place); returns the new log S."""
    n = (state.size - 1) // _BLOCKS
    keep, share, down, up = _KEEP * n, _SHARE * n, _DOWN * n, _UP * n
    weight, factor = _WEIGHT * n, _FACTOR * n
    d = p - 0.5
    total = 0.0
    for k in range(n):
        state[down + k] = state[keep + k] * state[down + k] + state[share + k]
        state[up + k] = state[keep + k] * state[up + k] + state[share + k]
        state[factor + k] = 1.0 + d * (state[up + k] - state[down + k])
        total += state[weight + k] * state[factor + k]
    for k in range(n):
        state[weight + k] = state[weight + k] * state[factor + k] / total
        state[down + k] = state[down + k] * (1.0 - d) / state[factor + k]
        state[up + k] = state[up + k] * (1.0 + d) / state[factor + k]
    state[-1] += math.log(total)
    return state[-1]


@jit
def _jumpers_path(ps: NDArray[np.float64], state: NDArray[np.float64]) -> NDArray[np.float64]:
    """The log-capital path of :func:`_jumpers_step` over ``ps``."""
    out = np.empty(ps.size, np.float64)
    for t in range(ps.size):
        out[t] = _jumpers_step(state, ps[t])
    return out


@cache
def _jumpers_step_entry() -> Callable[[NDArray[np.float64], float], float]:
    """:func:`_jumpers_step` compiled once, called without numba's per-call type dispatch."""
    return compiled_entry(_jumpers_step, np.zeros(_BLOCKS + 1, np.float64), 0.0)


class JumperMixture(ArrayStateBetting):
    """Plain average of independent Simple Jumpers with the given jump rates."""

    def __init__(self, jumps: tuple[float, ...]) -> None:
        if len(jumps) == 0:
            raise ValueError("at least one jump rate is needed")
        self._keep = [1.0 - check_jump(j) for j in jumps]
        self._share = [check_jump(j) / 3.0 for j in jumps]
        self.reset()

    def reset(self) -> None:
        k = len(self._keep)
        third, even = [1.0 / 3.0] * k, [1.0 / k] * k
        self._load(third, third, even, 0.0)

    def _load(self, down: list[float], up: list[float], weight: list[float], log_s: float) -> None:
        factor = [1.0] * len(self._keep)  # scratch space of the step
        self._set_state([*self._keep, *self._share, *down, *up, *weight, *factor, log_s], log_s)

    def _step_entry(self) -> Callable[[NDArray[np.float64], float], float]:
        return _jumpers_step_entry()

    def _path(self, ps: NDArray[np.float64]) -> NDArray[np.float64]:
        return _jumpers_path(ps, self._state)

    def _width(self) -> int:
        return len(self._keep)

    def log_factor(self, p: float) -> float:
        d = check_p(p) - 0.5
        total = 0.0
        for kp, sh, c_down, c_up, w in zip(
            self._keep, self._share, self._block(_DOWN), self._block(_UP), self._block(_WEIGHT),
            strict=True,
        ):
            total += w * (1.0 + d * ((kp * c_up + sh) - (kp * c_down + sh)))
        return math.log(total)

    def _jumper_state(self) -> dict[str, Any]:
        return {"down": self._block(_DOWN), "up": self._block(_UP),
                "weight": self._block(_WEIGHT), "log_s": self._log_s}

    def _load_jumper_state(self, state: dict[str, Any]) -> None:
        self._load([float(v) for v in state["down"]], [float(v) for v in state["up"]],
                   [float(v) for v in state["weight"]], float(state["log_s"]))

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
