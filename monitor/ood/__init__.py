"""OOD scorers: one real score per input row, **higher = more in-distribution**.

Every scorer in this package follows that single sign convention (MSP, max-logit, energy and
negative entropy are large for confident predictions; Mahalanobis and KNN are negative distances;
the activation-shaping scorers are energies of the shaped logits). A nonconformity score for a
conformal test is therefore ``-score``, and the conformal p-value of
:func:`monitor.decisions.conformal_p_values` is small for out-of-distribution inputs.

Each scorer reads one kind of model output, its ``input`` attribute: ``"features"`` (raw tabular
columns), ``"logits"`` or ``"embedding"`` (penultimate-layer activations). Build one by name with
:func:`make_scorer`; ``fit`` it on calibration data (a no-op for logit scorers) and ``score``
batches of shape ``(n, d)``.
"""

from monitor.ood.base import INPUT_KINDS, InputKind, NotFittedError, Scorer
from monitor.ood.energy import Energy
from monitor.ood.entropy import NegativeEntropy
from monitor.ood.knn import KNN
from monitor.ood.mahalanobis import Mahalanobis
from monitor.ood.max_logit import MaxLogit
from monitor.ood.msp import MSP
from monitor.ood.registry import SCORERS, make_scorer, scorer_from_state

__all__ = [
    "INPUT_KINDS",
    "KNN",
    "MSP",
    "SCORERS",
    "Energy",
    "InputKind",
    "Mahalanobis",
    "MaxLogit",
    "NegativeEntropy",
    "NotFittedError",
    "Scorer",
    "make_scorer",
    "scorer_from_state",
]
