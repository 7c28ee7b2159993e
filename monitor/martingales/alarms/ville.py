"""Ville's rule: alarm when the test martingale itself reaches 1/alpha."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from monitor.martingales.alarms.base import AlarmRule

__all__ = ["Ville"]


class Ville(AlarmRule):
    """Alarm when S_n ≥ 1/α; by Ville's inequality P(sup_n S_n ≥ 1/α) ≤ α under the null.

    The guarantee covers the whole stream (anytime-valid), not a run length. The alarm uses all
    the evidence since the start, but the changepoint is estimated from the path as for CUSUM:
    the last minimum of log S before the alarm, with the slack of
    :class:`~.base.RunningMinimum` (S_n/S_i is the evidence gathered after update i).

    Parameters
    ----------
    alpha
        False-alarm probability over the whole stream, in (0, 1).

    Examples
    --------
    >>> import numpy as np
    >>> from monitor.martingales.betting import CompositeJumper
    >>> rng = np.random.default_rng(0)
    >>> ps = np.concatenate([rng.uniform(size=200), rng.uniform(0, 0.2, size=100)])
    >>> rule = Ville(alpha=0.05)
    >>> rule.update_many(CompositeJumper().update_many(ps))  # first index with S_n ≥ 20
    221

    References
    ----------
    Ville, J. Étude critique de la notion de collectif (1939); ALRW 2nd ed., Section 9.1.
    """

    def __init__(self, alpha: float = 0.05) -> None:
        if not 0.0 < float(alpha) < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
        self.alpha = alpha
        self._log_threshold = -math.log(float(alpha))
        super().__init__()

    @property
    def threshold(self) -> float:
        return 1.0 / float(self.alpha)

    def _step(self, log_s: float) -> float:
        self._min.push(self._n, log_s)
        return log_s

    def _path(self, log_s: NDArray[np.float64]) -> NDArray[np.float64]:
        self._min.push_many(self._n, log_s)
        return log_s

    def _load_extra(self, state: dict[str, Any]) -> None:
        if "running_min" in state:
            super()._load_extra(state)
        elif self._n:  # saved before Ville estimated changepoints: estimate from here on
            self._min.prev, self._min.minimum = self._log_stat, self._log_stat
            self._min.argmin = self._min.estimate = self._n

    def _params(self) -> dict[str, Any]:
        return {"alpha": float(self.alpha)}
