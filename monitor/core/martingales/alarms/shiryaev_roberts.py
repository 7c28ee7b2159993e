"""Conformal Shiryaev–Roberts: R_n = Σ_{i<n} S_n / S_i, in O(1) per step."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales.alarms.base import RunLengthRule
from monitor.core.martingales.jit import jit
from monitor.core.martingales.state import decode_float, encode_float

__all__ = ["ShiryaevRoberts"]

_LN2 = math.log(2.0)


def logaddexp(x: float, y: float) -> float:
    """Scalar twin of ``np.logaddexp`` with the same branches, so the paths match bit for bit."""
    if x == y:
        return x + _LN2
    d = x - y
    if d > 0:
        return x + math.log1p(math.exp(-d))
    return y + math.log1p(math.exp(d))


#: :func:`logaddexp` compiled, for the batch kernels (``monitor/core/martingales/batch.py``).
logaddexp_compiled = jit(logaddexp)


class ShiryaevRoberts(RunLengthRule):
    """log R_n = log S_n + log Σ_{i<n} exp(-log S_i) (Vovk et al. 2021, eq. (6)), alarm at R_n ≥ c.

    The running log-sum A_n = logaddexp(A_{n-1}, -log S_{n-1}) makes each step O(1).
    Average run length: under the null, E[R_n | past] = R_{n-1} + 1, so R_n - n is a martingale;
    by optional stopping E[τ] = E[R_τ] ≥ c for the alarm time τ (Pollak 1987; Vovk et al. 2021,
    Section 4). The changepoint is that of :class:`~.base.RunningMinimum` (the latest
    argmin_{i<n} log S_i — the most probable change time under SR's uniform weighting of the
    components S_n/S_i — moved to the end of a flat stretch within 0.25 of it).

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
    >>> rule = ShiryaevRoberts(threshold=1000.0)
    >>> rule.update_many(CompositeJumper().update_many(ps))  # the shift starts at t = 500
    513
    >>> rule.alarm, rule.changepoint  # read after all 600 updates
    (True, 507)

    References
    ----------
    Vovk et al. Retrain or not retrain: conformal test martingales for change-point detection.
    COPA 2021, Section 4. Pollak, M. Average run lengths of an optimal method of detecting a
    change in distribution. Ann. Statist. 15 (1987).
    """

    def reset(self) -> None:
        super().reset()
        self._log_sum = -math.inf

    def _step(self, log_s: float) -> float:
        self._log_sum = logaddexp(self._log_sum, -self._min.prev)
        self._min.push(self._n, log_s)
        return log_s + self._log_sum

    def _path(self, log_s: NDArray[np.float64]) -> NDArray[np.float64]:
        prev = np.concatenate([[self._min.prev], log_s[:-1]])
        sums = np.logaddexp.accumulate(np.concatenate([[self._log_sum], -prev]))[1:]
        self._log_sum = float(sums[-1])
        self._min.push_many(self._n, log_s)
        return log_s + sums

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "log_sum": encode_float(self._log_sum)}

    def _load_extra(self, state: dict[str, Any]) -> None:
        super()._load_extra(state)
        self._log_sum = decode_float(state["log_sum"], -math.inf)
