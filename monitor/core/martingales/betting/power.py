"""Power betting function: S_n = ∏ ε p_i^(ε-1) (ALRW 2nd ed., eq. (9.8))."""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.martingales.betting.base import P_FLOOR, BettingFunction, check_p, check_ps
from monitor.core.martingales.state import check_state, new_state

__all__ = ["PowerBetting"]


class PowerBetting(BettingFunction):
    """Power martingale with fixed exponent ε: one-step factor ε·p^(ε-1).

    ∫_0^1 ε p^(ε-1) dp = 1 for every ε ∈ (0, 1], so S_n is a test martingale (ALRW, Section
    9.1). It bets only on small p-values; a p-value of exactly 0 (probability 0 for smoothed
    conformal p-values) is floored at the smallest normal float so log S stays finite.

    Parameters
    ----------
    epsilon
        Exponent ε ∈ (0, 1]; smaller ε bets harder on small p-values (ε = 1 never bets).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> pw = PowerBetting(epsilon=0.5)
    >>> path = pw.update_many(rng.uniform(0, 0.2, size=30))
    >>> int((path >= np.log(20)).argmax())  # first step past Ville's 1/alpha = 20
    3

    References
    ----------
    Vovk, Gammerman, Shafer. Algorithmic Learning in a Random World, 2nd ed., eq. (9.8).
    """

    def __init__(self, epsilon: float = 0.5) -> None:
        if not 0.0 < float(epsilon) <= 1.0:
            raise ValueError(f"epsilon must lie in (0, 1], got {epsilon!r}")
        self.epsilon = epsilon
        self._log_eps = math.log(float(epsilon))
        self._slope = float(epsilon) - 1.0
        self._log_s = 0.0

    def reset(self) -> None:
        self._log_s = 0.0

    def log_factor(self, p: float) -> float:
        return self._log_eps + self._slope * math.log(max(check_p(p), P_FLOOR))

    def update(self, p: float) -> None:
        self._log_s += self.log_factor(p)

    def update_many(self, ps: ArrayLike) -> NDArray[np.float64]:
        arr = np.maximum(check_ps(ps), P_FLOOR)
        # math.log, not np.log: numpy's SIMD log may differ in the last bit from libm's.
        logs = np.fromiter(map(math.log, arr.tolist()), np.float64, arr.size)
        steps = self._log_eps + self._slope * logs
        path = np.cumsum(np.concatenate([[self._log_s], steps]))[1:]
        if path.size:
            self._log_s = float(path[-1])
        return path

    def state_dict(self) -> dict[str, Any]:
        return new_state(self, params={"epsilon": float(self.epsilon)}, log_s=self._log_s)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(**state["params"])
        obj._log_s = float(state["log_s"])
        return obj
