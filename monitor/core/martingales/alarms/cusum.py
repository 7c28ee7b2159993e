"""Conformal CUSUM: γ_n = max_{i<n} S_n / S_i, in O(1) per step."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales.alarms.base import RunLengthRule

__all__ = ["CUSUM"]


class CUSUM(RunLengthRule):
    """log γ_n = log S_n - min_{i<n} log S_i (Vovk et al. 2021, eq. (5)), alarm at γ_n ≥ c.

    Average run length: γ_n ≤ R_n (the Shiryaev–Roberts statistic), so the CUSUM alarm never
    comes before the SR alarm with the same threshold, and E[τ] ≥ c under the null (see
    :class:`ShiryaevRoberts`). The changepoint is the last i at which log γ_i was within 0.25 of
    zero, Page's last-zero estimate with a little slack (:class:`~.base.RunningMinimum`).

    Parameters
    ----------
    threshold
        c > 1: the mean run length to a false alarm on an exchangeable stream is at least c.

    Examples
    --------
    >>> import numpy as np
    >>> from monitor.core.martingales.betting import CompositeJumper
    >>> rng = np.random.default_rng(0)
    >>> ps = np.concatenate([rng.uniform(size=500), rng.uniform(0, 0.2, size=100)])
    >>> jumper, rule = CompositeJumper(), CUSUM(threshold=1000.0)
    >>> for t, p in enumerate(ps):  # the shift starts at t = 500
    ...     jumper.update(p)
    ...     rule.update(jumper.log_martingale)
    ...     if rule.alarm:
    ...         break
    >>> t, rule.changepoint
    (534, 507)

    References
    ----------
    Vovk et al. Retrain or not retrain: conformal test martingales for change-point detection.
    COPA 2021, Section 4.
    """

    def _step(self, log_s: float) -> float:
        self._min.push(self._n, log_s)
        return log_s - self._min.minimum

    def _path(self, log_s: NDArray[np.float64]) -> NDArray[np.float64]:
        return log_s - self._min.push_many(self._n, log_s)
