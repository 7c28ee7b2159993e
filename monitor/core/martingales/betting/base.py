"""The betting-function interface: p-values in, a test martingale S_n (in log space) out.

A betting function is a sequence of one-step factors f_n(p) >= 0 with ∫_0^1 f_n(p) dp = 1 that
may depend on p_1..p_{n-1}; then S_n = ∏ f_i(p_i) is a test martingale under i.i.d. uniform
p-values (ALRW 2nd ed., Section 9.1; Vovk et al. 2021, "Retrain or not retrain", Section 2).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: p-values are floored here before a logarithm; a smoothed conformal p-value is 0 only with
#: probability 0 (U_t = 0 exactly), so flooring changes nothing almost surely.
P_FLOOR = 2.2250738585072014e-308


def check_p(p: float) -> float:
    """Return ``p`` as a float, or raise if it is not a p-value in [0, 1]."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p-value must lie in [0, 1], got {p!r}")
    return p


def check_ps(ps: ArrayLike) -> NDArray[np.float64]:
    """1-D float64 array of p-values, or raise if any is outside [0, 1] or NaN."""
    arr = np.asarray(ps, dtype=np.float64).reshape(-1)
    if not np.all((arr >= 0.0) & (arr <= 1.0)):
        raise ValueError("p-values must lie in [0, 1] (NaN is not a p-value)")
    return arr


class BettingFunction(ABC):
    """Turns conformal p-values into a test martingale S_n, kept as log S_n (S_0 = 1)."""

    _log_s: float

    @property
    def log_martingale(self) -> float:
        """log S_n after the updates so far (0 at start)."""
        return self._log_s

    @abstractmethod
    def update(self, p: float) -> None:
        """Bet on the next p-value."""

    @abstractmethod
    def log_factor(self, p: float) -> float:
        """log of the next one-step factor S_{n+1}/S_n if ``p`` were observed (no state change)."""

    def update_many(self, ps: ArrayLike) -> NDArray[np.float64]:
        """Bet on each p-value in turn; the log S path after each step (same as repeated update)."""
        arr = check_ps(ps)
        out = np.empty(arr.size, np.float64)
        for i, p in enumerate(arr.tolist()):
            self.update(p)
            out[i] = self._log_s
        return out

    @abstractmethod
    def reset(self) -> None:
        """Back to S_0 = 1."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (builtins and numpy arrays) restoring the object bit for bit."""

    @classmethod
    @abstractmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild from :meth:`state_dict` output."""
