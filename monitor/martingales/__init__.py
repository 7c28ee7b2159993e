"""The statistical core: conformal p-values, betting functions, alarm rules, weighted CTM.

Pure computation (numpy / scipy / river), no I/O. Formulas, validity arguments and departures
from the WATCH reference code: docs/algorithms.md.
"""

from __future__ import annotations

from monitor.martingales._state import StateError
from monitor.martingales.alarms import (
    ALARM_RULES,
    CUSUM,
    AlarmRule,
    ShiryaevRoberts,
    Ville,
    make_alarm_rule,
)
from monitor.martingales.betting import (
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
from monitor.martingales.density_ratio import OnlineDensityRatio
from monitor.martingales.pvalues import ConformalPValue, conformal_p_values
from monitor.martingales.weighted import WeightedConformalPValue

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
