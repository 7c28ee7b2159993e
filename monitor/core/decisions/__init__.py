"""OOD decision rules with FDR control, and the per-stream decider.

- :func:`conformal_p_values`: p = (1 + #{j : s_cal_j <= s_test}) / (m + 1) (higher score = more
  in-distribution, the sign convention of :mod:`monitor.core.ood`).
- :class:`FullConformalKNN`: full-conformal p-values of a KNN score against every calibration
  row (no split; the decider's default for KNN scorers).
- :func:`benjamini_hochberg` / :class:`BenjaminiHochberg`: g-BH on a batch.
- :func:`ensemble_bh` / :class:`EnsembleBH`: eg-BH, K p-value vectors merged by averaged BH
  e-values and e-BH (default; FDR <= alpha under any dependence between the K runs) or by twice
  the mean p-value.
- :class:`LOND`: online levels alpha_t = alpha·gamma_t·(D(t−1) + 1).
- :func:`make_rule`: ``"bh"``, ``"eg_bh"``, ``"lond"``.
- :class:`OODDecider` / :class:`WindowDecision`: the streaming integration.
"""

from monitor.core.decisions.base import BatchDecision
from monitor.core.decisions.bh import BenjaminiHochberg, benjamini_hochberg
from monitor.core.decisions.conformal import conformal_p_values
from monitor.core.decisions.decider import OODDecider, WindowDecision, default_scorers
from monitor.core.decisions.eg_bh import EnsembleBH, bh_e_values, e_benjamini_hochberg, ensemble_bh
from monitor.core.decisions.full_conformal import FullConformalKNN
from monitor.core.decisions.lond import LOND, gamma
from monitor.core.decisions.registry import RULES, make_rule

__all__ = [
    "LOND",
    "RULES",
    "BatchDecision",
    "BenjaminiHochberg",
    "EnsembleBH",
    "FullConformalKNN",
    "OODDecider",
    "WindowDecision",
    "benjamini_hochberg",
    "bh_e_values",
    "conformal_p_values",
    "default_scorers",
    "e_benjamini_hochberg",
    "ensemble_bh",
    "gamma",
    "make_rule",
]
