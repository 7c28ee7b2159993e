"""OOD scorers: one real score per input row, **higher = more in-distribution**.

Every scorer in this package follows that single sign convention (MSP, max-logit, energy and
negative entropy are large for confident predictions; Mahalanobis and KNN are negative distances;
the activation-shaping scorers ReAct, ASH-S, ASH-B, SCALE, BFAct and the fitted piecewise-linear
shaping are energies of the logits recomputed from shaped embeddings with the model's last layer,
read by :func:`load_last_layer`, the package's only I/O). A nonconformity score for a
conformal test is therefore ``-score``, and the conformal p-value of
:func:`monitor.core.decisions.conformal_p_values` is small for out-of-distribution inputs.

Each scorer reads one kind of model output, its ``input`` attribute: ``"features"`` (raw tabular
columns), ``"logits"`` or ``"embedding"`` (penultimate-layer activations). Build one by name with
:func:`make_scorer`; ``fit`` it on calibration data (a no-op for logit scorers) and ``score``
batches of shape ``(n, d)``.
"""

from monitor.core.ood.ash_b import ASHB
from monitor.core.ood.ash_s import ASHS
from monitor.core.ood.bank import reference_bank
from monitor.core.ood.base import INPUT_KINDS, InputKind, NotFittedError, Scorer
from monitor.core.ood.bfact import BFAct
from monitor.core.ood.energy import Energy
from monitor.core.ood.entropy import NegativeEntropy
from monitor.core.ood.knn import KNN
from monitor.core.ood.mahalanobis import Mahalanobis
from monitor.core.ood.max_logit import MaxLogit
from monitor.core.ood.msp import MSP
from monitor.core.ood.piecewise import PiecewiseLinear
from monitor.core.ood.react import ReAct
from monitor.core.ood.registry import NEEDS_LAST_LAYER, SCORERS, make_scorer, scorer_from_state
from monitor.core.ood.scale import SCALE
from monitor.core.ood.shaping import ShapedEnergy, load_last_layer

__all__ = [
    "ASHB",
    "ASHS",
    "INPUT_KINDS",
    "KNN",
    "MSP",
    "NEEDS_LAST_LAYER",
    "SCALE",
    "SCORERS",
    "BFAct",
    "Energy",
    "InputKind",
    "Mahalanobis",
    "MaxLogit",
    "NegativeEntropy",
    "NotFittedError",
    "PiecewiseLinear",
    "ReAct",
    "Scorer",
    "ShapedEnergy",
    "load_last_layer",
    "make_scorer",
    "reference_bank",
    "scorer_from_state",
]
