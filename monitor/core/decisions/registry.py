"""Decision rules by name: ``make_rule("eg_bh", alpha=0.1)``."""

from __future__ import annotations

from typing import Any

from monitor.core.decisions.bh import BenjaminiHochberg
from monitor.core.decisions.eg_bh import EnsembleBH
from monitor.core.decisions.lond import LOND

RULES: dict[str, type[BenjaminiHochberg] | type[EnsembleBH] | type[LOND]] = {
    "bh": BenjaminiHochberg,
    "eg_bh": EnsembleBH,
    "lond": LOND,
}


def make_rule(
    name: str, alpha: float = 0.1, **params: Any
) -> BenjaminiHochberg | EnsembleBH | LOND:
    """A decision rule from its name: ``bh`` (g-BH), ``eg_bh`` (ensemble, default merge by
    e-values) or ``lond`` (online). Batch rules have ``decide(p_values) -> BatchDecision``;
    LOND has ``update(p) -> None`` and a ``rejected`` property.

    Examples
    --------
    >>> make_rule("eg_bh", alpha=0.05).decide([[0.0001, 0.9]]).rejected.tolist()
    [True, False]
    """
    if name not in RULES:
        raise ValueError(f"rule must be one of {sorted(RULES)}, got {name!r}")
    return RULES[name](alpha, **params)
