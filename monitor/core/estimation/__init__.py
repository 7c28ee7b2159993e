"""Label-free performance estimation and a label-free harm detector (library level for now:
no stream, storage or API uses them yet). See ``docs/explain.md`` and ``docs/algorithms.md``
section 10.

- :class:`CalibratedConfidence` (CBPE-style): expected accuracy and expected 1 − p̂(y|x) of a
  classifier from its calibrated confidence.
- :class:`AbsoluteErrorModel` (DLE-style): expected MAE of a regressor from a model of |y − ŷ|.
- :class:`LabelFreeHarmDetector` (Amoukou et al. 2024): an anytime-valid test that the share
  of events an error estimator flags stays at most q + tolerance.
- :class:`FlagRateTest`: the betting test of a Bernoulli rate it runs.
"""

from monitor.core.estimation.base import LossEstimator, split_calibration
from monitor.core.estimation.classification import CalibratedConfidence
from monitor.core.estimation.flag_rate import FlagRateTest
from monitor.core.estimation.harm import LabelFreeHarmDetector
from monitor.core.estimation.regression import AbsoluteErrorModel, with_prediction

__all__ = [
    "AbsoluteErrorModel",
    "CalibratedConfidence",
    "FlagRateTest",
    "LabelFreeHarmDetector",
    "LossEstimator",
    "split_calibration",
    "with_prediction",
]
