"""Scorers by name: ``make_scorer("knn", k=1)``."""

from __future__ import annotations

from typing import Any

from monitor.ood.base import Scorer, check_choice
from monitor.ood.energy import Energy
from monitor.ood.entropy import NegativeEntropy
from monitor.ood.knn import KNN
from monitor.ood.mahalanobis import Mahalanobis
from monitor.ood.max_logit import MaxLogit
from monitor.ood.msp import MSP

SCORERS: dict[str, type[Scorer]] = {
    cls.name: cls for cls in (MSP, MaxLogit, Energy, NegativeEntropy, Mahalanobis, KNN)
}


def make_scorer(name: str, **params: Any) -> Scorer:
    """A new, unfitted scorer from its registry name and constructor parameters.

    Examples
    --------
    >>> make_scorer("knn", standardize=True, normalize=False, k=1)
    KNN(k=1, normalize=False, standardize=True, input_kind=None)
    """
    check_choice("scorer name", name, SCORERS)
    return SCORERS[name](**params)


def scorer_from_state(state: dict[str, Any]) -> Scorer:
    """Rebuild a scorer saved with :meth:`Scorer.state_dict`."""
    check_choice("scorer name", state.get("name"), SCORERS)
    return SCORERS[state["name"]].from_state(state)
