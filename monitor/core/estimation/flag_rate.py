"""An anytime-valid one-sided test of a Bernoulli rate by betting: H0: E[f_t | past] ≤ θ0."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike
from scipy.signal import lfilter
from scipy.special import logsumexp

from monitor.core.detectors.base import FloatArray
from monitor.core.estimation.base import check_unit_interval
from monitor.core.martingales.state import check_state, new_state

__all__ = ["FlagRateTest"]

#: Forgetting rates of the mixed bettors: effective memories of about 500, 100 and 20 flags.
DEFAULT_FORGETTING: tuple[float, ...] = (0.002, 0.01, 0.05)


class FlagRateTest:
    """Betting test martingale of "the flags' rate is at most θ0", alarming at 1/alpha.

    Each bettor k holds the wealth K_t = Π_{i ≤ t} (1 + λ_i (f_i − θ0)) on flags f_i ∈ {0, 1}
    (Waudby-Smith & Ramdas 2024, the capital process of Section 4 at m = θ0, one-sided:
    λ_i ≥ 0). Its bet is the Kelly bet for a Bernoulli rate, λ* = (μ − θ0) / (θ0 (1 − θ0))
    (the maximiser of μ log(1 + λ(1 − θ0)) + (1 − μ) log(1 − λ θ0)), plugged in with μ the
    discounted mean m_{i−1} of the flags *before* i (m ← m + β (f − m), m_0 = θ0) and clipped
    to [0, ``cap``/θ0]. Under H0, E[1 + λ_i (f_i − θ0) | past] = 1 + λ_i (E[f_i | past] − θ0)
    ≤ 1 for any predictable λ_i ≥ 0, so K is a non-negative supermartingale with K_0 = 1; so
    is the average of the bettors' wealths (one per forgetting rate β), and Ville's inequality
    gives P(∃t: K_t ≥ 1/alpha) ≤ alpha. Equivalently: θ0 leaves the one-sided betting
    confidence sequence {m : K_t(m) < 1/alpha} for the rate at the first alarm.

    :meth:`restart` puts the wealths back to 1 and keeps the discounted means (predictable
    either way).

    Parameters
    ----------
    null_rate
        θ0 in (0, 1).
    alpha
        Level: the test alarms when the mixture wealth reaches 1/alpha.
    forgetting
        The bettors' discount rates β in (0, 1].
    cap
        The bet's largest loss per step, in (0, 1): λ ≤ cap/θ0, so a factor is >= 1 − cap.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> test = FlagRateTest(null_rate=0.12, alpha=0.01)
    >>> test.update_many(rng.uniform(size=2000) < 0.10) is None  # under H0: no alarm
    True
    >>> test.update_many(rng.uniform(size=2000) < 0.25)  # the rate doubles: alarm at this index
    100
    """

    def __init__(self, null_rate: float, alpha: float = 0.01,
                 forgetting: Sequence[float] = DEFAULT_FORGETTING, cap: float = 0.5) -> None:
        check_unit_interval("null_rate", null_rate)
        check_unit_interval("alpha", alpha)
        check_unit_interval("cap", cap)
        rates = tuple(float(b) for b in forgetting)
        if not rates or not all(0.0 < b <= 1.0 for b in rates):
            raise ValueError(f"forgetting must be one or more rates in (0, 1], got {forgetting!r}")
        self.null_rate = float(null_rate)
        self.alpha = float(alpha)
        self.forgetting = rates
        self.cap = float(cap)
        self._beta = np.array(rates)
        self._mean = np.full(len(rates), self.null_rate)
        self._log_wealth = np.zeros(len(rates))

    @property
    def log_wealth(self) -> float:
        """log of the mixture wealth (the mean of the bettors' wealths)."""
        return float(logsumexp(self._log_wealth) - math.log(self._log_wealth.size))

    @property
    def log_threshold(self) -> float:
        return math.log(1.0 / self.alpha)

    @property
    def alarm(self) -> bool:
        return self.log_wealth >= self.log_threshold

    def update_many(self, flags: ArrayLike) -> int | None:
        """Bet on the flags in order up to the first alarm: its position in ``flags`` (the flags
        after it are not used), else None (every flag used)."""
        f = np.asarray(flags, dtype=np.float64).reshape(-1)
        if f.size == 0:
            return None
        means = self._means(f)  # (K, n + 1): m before each flag, then after the last
        lam = np.clip((means[:, :-1] - self.null_rate) / (self.null_rate * (1 - self.null_rate)),
                      0.0, self.cap / self.null_rate)
        path = self._log_wealth[:, None] + np.cumsum(np.log1p(lam * (f - self.null_rate)), 1)
        mixture = logsumexp(path, axis=0) - math.log(path.shape[0])
        hits = np.flatnonzero(mixture >= self.log_threshold)
        last = int(hits[0]) if hits.size else f.size - 1
        self._mean = means[:, last + 1].copy()
        self._log_wealth = path[:, last].copy()
        return last if hits.size else None

    def _means(self, f: FloatArray) -> FloatArray:
        """Discounted means m_0 (now), m_1, …, m_n of each bettor over the flags ``f``."""
        out = np.empty((self._beta.size, f.size + 1))
        out[:, 0] = self._mean
        for k, (b, m0) in enumerate(zip(self._beta, self._mean, strict=True)):
            # m_t = (1 − β) m_{t−1} + β f_t, started at m0: a first-order IIR filter.
            out[k, 1:] = lfilter([b], [1.0, b - 1.0], f, zi=[(1.0 - b) * m0])[0]
        return out

    def restart(self) -> None:
        """Wealths back to 1 (the discounted means stay)."""
        self._log_wealth = np.zeros(self._beta.size)

    def state_dict(self) -> dict[str, Any]:
        return new_state(self, null_rate=self.null_rate, alpha=self.alpha,
                         forgetting=list(self.forgetting), cap=self.cap,
                         mean=self._mean.copy(), log_wealth=self._log_wealth.copy())

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(float(state["null_rate"]), float(state["alpha"]),
                  tuple(state["forgetting"]), float(state["cap"]))
        obj._mean = np.asarray(state["mean"], np.float64).copy()
        obj._log_wealth = np.asarray(state["log_wealth"], np.float64).copy()
        return obj

