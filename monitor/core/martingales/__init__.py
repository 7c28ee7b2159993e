"""The statistical core: conformal p-values, betting functions, alarm rules, weighted CTM.

Pure computation (numpy / scipy / river), no I/O. Formulas, validity arguments and departures
from the WATCH reference code: docs/algorithms.md.
"""

from __future__ import annotations

from monitor.core.martingales.alarms import (
    ALARM_RULES,
    CUSUM,
    AlarmRule,
    ShiryaevRoberts,
    Ville,
    make_alarm_rule,
)
from monitor.core.martingales.betting import (
    BETTING_FUNCTIONS,
    AGrapaBetting,
    BettingFunction,
    CompositeJumper,
    PlugInPower,
    PowerBetting,
    SimpleJumper,
    SimpleMixture,
    make_betting,
)
from monitor.core.martingales.density_ratio import OnlineDensityRatio
from monitor.core.martingales.pvalues import ConformalPValue, conformal_p_values
from monitor.core.martingales.state import StateError
from monitor.core.martingales.weighted import WeightedConformalPValue

__all__ = [
    "ALARM_RULES",
    "BETTING_FUNCTIONS",
    "CUSUM",
    "AGrapaBetting",
    "AlarmRule",
    "BettingFunction",
    "CompositeJumper",
    "ConformalPValue",
    "OnlineDensityRatio",
    "PlugInPower",
    "PowerBetting",
    "ShiryaevRoberts",
    "SimpleJumper",
    "SimpleMixture",
    "StateError",
    "Ville",
    "WeightedConformalPValue",
    "conformal_p_values",
    "make_alarm_rule",
    "make_betting",
]
