"""CBPE-style estimation for a classifier: expected accuracy from its calibrated confidence."""

from __future__ import annotations

from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.detectors.base import FloatArray, as_matrix, check_choice
from monitor.core.estimation.base import LossEstimator, check_rows, check_weights
from monitor.core.martingales.state import check_state, new_state

__all__ = ["CALIBRATION_METHODS", "CalibratedConfidence"]

CALIBRATION_METHODS: tuple[str, ...] = ("isotonic", "sigmoid")

#: Platt's logit is taken of the confidence clipped to [ε, 1 − ε].
_EPS = 1e-6


class CalibratedConfidence(LossEstimator):
    """Calibrated probability that a classifier's prediction is right, and the window means.

    The confidence c(z) = max_k p̂_k of the class probabilities ``z`` is mapped to
    ĉ(z) ≈ P(Y = argmax p̂ | z) by a monotone calibration fitted on labelled rows: isotonic
    regression of the correctness 1{argmax p̂ = y} on c (Zadrozny & Elkan 2002) or Platt's
    logistic curve on logit c (Platt 1999). The expected accuracy of a window is the mean of ĉ
    (CBPE, NannyML: the expected confusion matrix from calibrated probabilities, here for the
    top-label event only, which any number of classes shares). The expected loss 1 − p̂(Y|x)
    spreads the calibrated error mass 1 − ĉ over the other classes in proportion to p̂
    (exact for two classes):

        E[1 − p̂(Y|x)] = 1 − ĉ c − (1 − ĉ) Σ_{k ≠ ŷ} p̂_k² / (1 − c).

    The estimates are right when the calibration holds on the window's law: under covariate
    shift (p(y|x) unchanged) and for a calibration fitted on the same kind of inputs. Refit with
    ``sample_weight`` = w(x) (the density ratio of the window to the calibration) to calibrate
    under the window's law where the model is miscalibrated differently across inputs (PAPE,
    Białek et al. 2024). A concept shift (p(y|x) changed) is invisible to any label-free
    estimate.

    Parameters
    ----------
    method
        ``"isotonic"`` or ``"sigmoid"`` (Platt).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p1 = rng.uniform(size=4000)
    >>> y = (rng.uniform(size=4000) < p1 ** 2).astype(int)  # overconfident in class 1
    >>> Z = np.c_[1 - p1, p1]
    >>> est = CalibratedConfidence().fit(Z[:2000], y[:2000])
    >>> round(est.estimate(Z[2000:]), 3), round(est.realised(Z[2000:], y[2000:]), 3)
    (0.738, 0.739)
    """

    metric = "accuracy"

    def __init__(self, method: str = "isotonic") -> None:
        check_choice("method", method, CALIBRATION_METHODS)
        self.method = method
        self._knots: FloatArray | None = None  # isotonic: confidences, then calibrated values
        self._values: FloatArray | None = None
        self._platt: tuple[float, float] | None = None

    def clone(self) -> Self:
        return type(self)(self.method)

    # ------------------------------------------------------------------------------- fit
    def fit(self, Z: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> Self:
        arr, labels = check_rows(_probabilities(Z), y)
        w = check_weights(sample_weight, arr.shape[0])
        correct = (arr.argmax(axis=1) == labels.astype(np.int64)).astype(np.float64)
        confidence = arr.max(axis=1)
        if self.method == "isotonic":
            self._fit_isotonic(confidence, correct, w)
        else:
            self._fit_platt(confidence, correct, w)
        return self

    def _fit_isotonic(self, c: FloatArray, correct: FloatArray, w: FloatArray | None) -> None:
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip")
        iso.fit(c, correct, sample_weight=w)
        # sklearn predicts by linear interpolation between these knots, clipped at the ends:
        # np.interp does the same, so the state is the knots alone.
        self._knots = np.asarray(iso.X_thresholds_, np.float64)
        self._values = np.asarray(iso.y_thresholds_, np.float64)

    def _fit_platt(self, c: FloatArray, correct: FloatArray, w: FloatArray | None) -> None:
        from sklearn.linear_model import LogisticRegression

        if correct.min() == correct.max():
            raise ValueError("sigmoid calibration needs both right and wrong predictions")
        model = LogisticRegression(C=1e6).fit(_logit(c)[:, None], correct, sample_weight=w)
        self._platt = (float(model.coef_[0, 0]), float(model.intercept_[0]))

    # --------------------------------------------------------------------------- predict
    def calibrated_confidence(self, Z: ArrayLike) -> FloatArray:
        """ĉ of each row: the calibrated probability that argmax p̂ is the label."""
        c = _probabilities(Z).max(axis=1)
        if self._knots is not None and self._values is not None:
            return np.interp(c, self._knots, self._values)
        if self._platt is not None:
            a, b = self._platt
            return np.asarray(1.0 / (1.0 + np.exp(-(a * _logit(c) + b))), np.float64)
        raise ValueError("CalibratedConfidence is not fitted: call fit first")

    def predicted_loss(self, Z: ArrayLike) -> FloatArray:
        """1 − ĉ: the calibrated probability that the prediction is wrong."""
        return 1.0 - self.calibrated_confidence(Z)

    def flag_score(self, Z: ArrayLike) -> FloatArray:
        """1 − ĉ, its ties broken by the raw 1 − c: isotonic ĉ is a step function of c, and a
        threshold inside a step would flag far fewer than q of the events (the 1e-6 keeps
        the order of distinct ĉ values, whose steps are wider)."""
        c = _probabilities(Z).max(axis=1)
        return self.predicted_loss(Z) + 1e-6 * (1.0 - c)

    def estimate(self, Z: ArrayLike) -> float:
        """Expected accuracy of the window's predictions."""
        return float(np.mean(self.calibrated_confidence(Z)))

    def estimate_loss(self, Z: ArrayLike) -> float:
        """Expected mean of 1 − p̂(y|x) over the window (formula in the class docstring)."""
        p = _probabilities(Z)
        c_hat = self.calibrated_confidence(p)
        c = p.max(axis=1)
        others = (np.square(p).sum(axis=1) - c * c) / np.maximum(1.0 - c, 1e-12)
        return float(np.mean(1.0 - c_hat * c - (1.0 - c_hat) * others))

    def realised(self, Z: ArrayLike, y: ArrayLike) -> float:
        """Accuracy of the window's predictions against its labels."""
        p, labels = check_rows(_probabilities(Z), y)
        return float(np.mean(p.argmax(axis=1) == labels.astype(np.int64)))

    @staticmethod
    def realised_loss(Z: ArrayLike, y: ArrayLike) -> float:
        """Mean of 1 − p̂(y|x) over the window against its labels."""
        p, labels = check_rows(_probabilities(Z), y)
        return float(np.mean(1.0 - p[np.arange(p.shape[0]), labels.astype(np.int64)]))

    # ----------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return new_state(self, method=self.method, knots=self._knots, values=self._values,
                         platt=None if self._platt is None else list(self._platt))

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(str(state["method"]))
        if state["knots"] is not None:
            obj._knots = np.asarray(state["knots"], np.float64)
            obj._values = np.asarray(state["values"], np.float64)
        if state["platt"] is not None:
            a, b = state["platt"]
            obj._platt = (float(a), float(b))
        return obj


def _probabilities(Z: ArrayLike) -> FloatArray:
    """Class probabilities: a finite (n, k >= 2) matrix with entries in [0, 1]."""
    p = as_matrix(Z, "Z")
    if p.shape[1] < 2 or p.min() < 0.0 or p.max() > 1.0:
        raise ValueError(
            f"Z must hold class probabilities in [0, 1], one column per class (>= 2), "
            f"got shape {p.shape}"
        )
    return p


def _logit(c: FloatArray) -> FloatArray:
    clipped = np.clip(c, _EPS, 1.0 - _EPS)
    return np.asarray(np.log(clipped) - np.log1p(-clipped), np.float64)


