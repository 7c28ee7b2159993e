"""Ville's rule: alarm when the test martingale itself reaches 1/alpha."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales.alarms.base import AlarmRule

__all__ = ["SPENDING", "Ville"]

#: How a Ville rule spends alpha across restarts (``Ville`` docstring).
SPENDING = ("per_segment", "lifetime")


class Ville(AlarmRule):
    """Alarm when S_n ≥ 1/α; by Ville's inequality P(sup_n S_n ≥ 1/α) ≤ α under the null.

    The guarantee covers one martingale from its start (anytime-valid), not a run length. The
    alarm uses all the evidence since the start, but the changepoint is estimated from the path
    as for CUSUM: the last minimum of log S before the alarm, with the slack of
    :class:`~.base.RunningMinimum` (S_n/S_i is the evidence gathered after update i).

    A detector restarts the martingale after an alarm (re-baselining), and each restart is a new
    Ville test. ``spending="per_segment"`` keeps α for every segment: P(a false alarm in each
    segment) ≤ α, so over a life of K segments up to K·α. ``spending="lifetime"`` spends α
    across segments: segment k = 1, 2, … alarms at S ≥ 1/α_k with α_k = α·6/(π²k²), and since
    Σ_k 6/(π²k²) = 1 the union bound gives P(any false alarm over the whole life) ≤ α.
    A segment counts only once it has seen an update (a reset of a fresh rule spends nothing).

    Parameters
    ----------
    alpha
        False-alarm probability, in (0, 1): per segment or over the rule's whole life.
    spending
        ``"per_segment"`` (α for each segment) or ``"lifetime"`` (α over all segments).

    Examples
    --------
    >>> import numpy as np
    >>> from monitor.core.martingales.betting import CompositeJumper
    >>> rng = np.random.default_rng(0)
    >>> ps = np.concatenate([rng.uniform(size=200), rng.uniform(0, 0.2, size=100)])
    >>> rule = Ville(alpha=0.05)
    >>> rule.update_many(CompositeJumper().update_many(ps))  # first index with S_n ≥ 20
    221

    References
    ----------
    Ville, J. Étude critique de la notion de collectif (1939); ALRW 2nd ed., Section 9.1.
    """

    def __init__(self, alpha: float = 0.05, spending: str = "per_segment") -> None:
        if not 0.0 < float(alpha) < 1.0:
            raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
        if spending not in SPENDING:
            raise ValueError(f"spending must be one of {list(SPENDING)}, got {spending!r}")
        self.alpha = alpha
        self.spending = spending
        self._segment = 0
        super().__init__()

    def reset(self) -> None:
        if self._segment == 0 or self._n > 0:
            self._segment += 1
        self._log_threshold = -math.log(self.segment_alpha)
        super().reset()

    @property
    def segment(self) -> int:
        """The current segment k (1 until the first restart after an update)."""
        return self._segment

    @property
    def segment_alpha(self) -> float:
        """α_k of the current segment: α (``per_segment``) or α·6/(π²k²) (``lifetime``)."""
        if self.spending == "per_segment":
            return float(self.alpha)
        return float(self.alpha) * 6.0 / (math.pi**2 * self._segment**2)

    @property
    def threshold(self) -> float:
        return 1.0 / self.segment_alpha

    def _step(self, log_s: float) -> float:
        self._min.push(self._n, log_s)
        return log_s

    def _path(self, log_s: NDArray[np.float64]) -> NDArray[np.float64]:
        self._min.push_many(self._n, log_s)
        return log_s


    def _params(self) -> dict[str, Any]:
        return {"alpha": float(self.alpha), "spending": self.spending}

    def _extra_state(self) -> dict[str, Any]:
        return {**super()._extra_state(), "segment": self._segment}

    def _load_extra(self, state: dict[str, Any]) -> None:
        if "running_min" in state:
            super()._load_extra(state)
        elif self._n:  # saved before Ville estimated changepoints: estimate from here on
            self._min.prev, self._min.minimum = self._log_stat, self._log_stat
            self._min.argmin = self._min.estimate = self._n
        self._segment = int(state.get("segment", 1))
        self._log_threshold = -math.log(self.segment_alpha)
