"""Detectors: conformal test martingales on a stream, river style.

Every detector changes state only through ``update(...) -> None`` and exposes read-only
properties (``alarm``, ``statistic``, ``log_statistic``, ``threshold``, ``p_value``,
``log_martingale``, ``changepoint``, ``n_seen``); ``state_dict()`` / ``from_state()`` save and
restore it exactly. See ``docs/detectors.md``.
"""

from monitor.core.detectors.base import AlarmEvent
from monitor.core.detectors.conditional import ConditionalMonitor
from monitor.core.detectors.covariate import TABULAR_SCORERS, CovariateMonitor

__all__ = ["TABULAR_SCORERS", "AlarmEvent", "ConditionalMonitor", "CovariateMonitor"]
