"""Scorers by name: ``make_scorer("knn", k=1)``."""

from __future__ import annotations

from typing import Any

from monitor.core.ood.ash_b import ASHB
from monitor.core.ood.ash_s import ASHS
from monitor.core.ood.base import Scorer, check_choice
from monitor.core.ood.bfact import BFAct
from monitor.core.ood.energy import Energy
from monitor.core.ood.entropy import NegativeEntropy
from monitor.core.ood.knn import KNN
from monitor.core.ood.mahalanobis import Mahalanobis
from monitor.core.ood.max_logit import MaxLogit
from monitor.core.ood.msp import MSP
from monitor.core.ood.piecewise import PiecewiseLinear
from monitor.core.ood.react import ReAct
from monitor.core.ood.scale import SCALE

SCORERS: dict[str, type[Scorer]] = {
    cls.name: cls
    for cls in (
        MSP,
        MaxLogit,
        Energy,
        NegativeEntropy,
        Mahalanobis,
        KNN,
        ReAct,
        ASHS,
        ASHB,
        SCALE,
        BFAct,
        PiecewiseLinear,
    )
}

#: Scorers that need the model's last layer (``W``, ``b``) as constructor arguments.
NEEDS_LAST_LAYER: frozenset[str] = frozenset(
    {"react", "ash_s", "ash_b", "scale", "bfact", "piecewise"}
)


def make_scorer(name: str, **params: Any) -> Scorer:
    """A new, unfitted scorer from its registry name and constructor parameters.

    Names: ``msp``, ``max_logit``, ``energy``, ``entropy`` (logits); ``mahalanobis``, ``knn``
    (features or embeddings); ``react``, ``ash_s``, ``ash_b``, ``scale``, ``bfact``,
    ``piecewise`` (embeddings, with ``W`` and ``b`` of the last layer).

    Examples
    --------
    >>> make_scorer("knn", standardize=True, normalize=False, k=1)
    KNN(k=1, normalize=False, standardize=True, input_kind=None, dtype='float64')
    >>> make_scorer("energy", temperature=2.0).input
    'logits'
    """
    check_choice("scorer name", name, SCORERS)
    if name in NEEDS_LAST_LAYER and not {"W", "b"} <= params.keys():
        raise ValueError(
            f"scorer {name!r} needs the model's last layer: pass W= and b= (see load_last_layer)"
        )
    return SCORERS[name](**params)


def scorer_from_state(state: dict[str, Any]) -> Scorer:
    """Rebuild a scorer saved with :meth:`Scorer.state_dict`."""
    check_choice("scorer name", state.get("name"), SCORERS)
    return SCORERS[state["name"]].from_state(state)
