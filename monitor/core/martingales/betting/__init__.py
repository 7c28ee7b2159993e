"""Betting functions: conformal p-values in, a test martingale (log S_n) out."""

from __future__ import annotations

from typing import Any

from monitor.core.martingales.betting.agrapa import AGrapaBetting
from monitor.core.martingales.betting.base import BettingFunction
from monitor.core.martingales.betting.composite_jumper import CompositeJumper
from monitor.core.martingales.betting.mixture import SimpleMixture
from monitor.core.martingales.betting.plug_in_power import PlugInPower
from monitor.core.martingales.betting.power import PowerBetting
from monitor.core.martingales.betting.simple_jumper import SimpleJumper

__all__ = [
    "BETTING_FUNCTIONS",
    "AGrapaBetting",
    "BettingFunction",
    "CompositeJumper",
    "PlugInPower",
    "PowerBetting",
    "SimpleJumper",
    "SimpleMixture",
    "make_betting",
]

BETTING_FUNCTIONS: dict[str, type[BettingFunction]] = {
    "simple_jumper": SimpleJumper,
    "composite_jumper": CompositeJumper,
    "power": PowerBetting,
    "mixture": SimpleMixture,
    "agrapa": AGrapaBetting,
    "plug_in_power": PlugInPower,
}


def make_betting(name: str, **params: Any) -> BettingFunction:
    """Build a betting function by its configuration name.

    Examples
    --------
    >>> make_betting("power", epsilon=0.2).epsilon
    0.2
    """
    try:
        cls = BETTING_FUNCTIONS[name]
    except KeyError:
        valid = ", ".join(sorted(BETTING_FUNCTIONS))
        raise ValueError(f"unknown betting function {name!r}; valid: {valid}") from None
    return cls(**params)
