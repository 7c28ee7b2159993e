"""Alarm rules on a log test martingale: Ville, CUSUM, Shiryaev–Roberts."""

from __future__ import annotations

from monitor.core.martingales.alarms.base import AlarmRule
from monitor.core.martingales.alarms.budget import DEFAULT_EVENTS, MAX_RATE, EventRateThreshold
from monitor.core.martingales.alarms.cusum import CUSUM
from monitor.core.martingales.alarms.shiryaev_roberts import ShiryaevRoberts
from monitor.core.martingales.alarms.ville import SPENDING, Ville

__all__ = [
    "ALARM_RULES",
    "CUSUM",
    "DEFAULT_EVENTS",
    "MAX_RATE",
    "SPENDING",
    "AlarmRule",
    "EventRateThreshold",
    "ShiryaevRoberts",
    "Ville",
    "make_alarm_rule",
]

ALARM_RULES = ("ville", "cusum", "shiryaev_roberts")


def make_alarm_rule(
    rule: str, threshold: float = 10_000.0, alpha: float = 0.05, spending: str = "per_segment"
) -> AlarmRule:
    """Build an alarm rule by its configuration name (``threshold``, or ``alpha`` and
    ``spending`` for Ville).

    Examples
    --------
    >>> make_alarm_rule("ville", threshold=100.0, alpha=0.01).threshold
    100.0
    >>> make_alarm_rule("cusum", threshold=500.0, alpha=0.05).threshold
    500.0
    """
    if rule == "ville":
        return Ville(alpha=alpha, spending=spending)
    if rule == "cusum":
        return CUSUM(threshold=threshold)
    if rule == "shiryaev_roberts":
        return ShiryaevRoberts(threshold=threshold)
    raise ValueError(f"unknown alarm rule {rule!r}; valid: {', '.join(ALARM_RULES)}")
