"""OOD scorers: one real score per input row, **higher = more in-distribution**.

Every scorer in this package follows that single sign convention (MSP, max-logit, energy and
negative entropy are large for confident predictions; Mahalanobis and KNN are negative distances;
the activation-shaping scorers ReAct, ASH-S, ASH-B, SCALE, BFAct and the fitted piecewise-linear
shaping are energies of the logits recomputed from shaped embeddings with the model's last layer,
read by :func:`load_last_layer`, the package's only I/O). A nonconformity score for a
conformal test is therefore ``-score``, and the conformal p-value of
:func:`monitor.decisions.conformal_p_values` is small for out-of-distribution inputs.

Each scorer reads one kind of model output, its ``input`` attribute: ``"features"`` (raw tabular
columns), ``"logits"`` or ``"embedding"`` (penultimate-layer activations). Build one by name with
:func:`make_scorer`; ``fit`` it on calibration data (a no-op for logit scorers) and ``score``
batches of shape ``(n, d)``.
"""

from monitor.ood.ash_b import ASHB
from monitor.ood.ash_s import ASHS
from monitor.ood.base import INPUT_KINDS, InputKind, NotFittedError, Scorer
from monitor.ood.bfact import BFAct
from monitor.ood.energy import Energy
from monitor.ood.entropy import NegativeEntropy
from monitor.ood.knn import KNN
from monitor.ood.mahalanobis import Mahalanobis
from monitor.ood.max_logit import MaxLogit
from monitor.ood.msp import MSP
from monitor.ood.piecewise import PiecewiseLinear
from monitor.ood.react import ReAct
from monitor.ood.registry import NEEDS_LAST_LAYER, SCORERS, make_scorer, scorer_from_state
from monitor.ood.scale import SCALE
from monitor.ood.shaping import ShapedEnergy, load_last_layer

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
    "scorer_from_state",
]
