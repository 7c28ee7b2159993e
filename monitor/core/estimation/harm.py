"""Label-free harm detector: is the share of events an error estimator flags above its
calibration level? (Amoukou et al. 2024; docs/algorithms.md section 10)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import beta as beta_law

from monitor.core.detectors.base import (
    MONITORING,
    AlarmEvent,
    FloatArray,
    Lifecycle,
    as_matrix,
    check_seed,
)
from monitor.core.estimation.base import (
    LossEstimator,
    check_rows,
    check_unit_interval,
    split_calibration,
)
from monitor.core.estimation.classification import CalibratedConfidence
from monitor.core.estimation.flag_rate import DEFAULT_FORGETTING, FlagRateTest
from monitor.core.estimation.regression import AbsoluteErrorModel
from monitor.core.martingales.state import check_state, new_state

__all__ = ["LabelFreeHarmDetector"]

_ESTIMATORS: dict[str, type[LossEstimator]] = {
    cls.__name__: cls for cls in (CalibratedConfidence, AbsoluteErrorModel)
}

#: ``on_alarm(i, event)`` of :meth:`LabelFreeHarmDetector.update_batch`.
HarmAlarmCallback = Callable[[int, AlarmEvent], None]


class LabelFreeHarmDetector(Lifecycle[AlarmEvent]):
    """Sequential harmful-shift detection without labels (Amoukou et al. 2024).

    The labelled calibration rows are split at random: an error estimator ℓ̂ (a
    :class:`~monitor.core.estimation.LossEstimator`, cloned) is fitted on a share
    ``fit_fraction`` of them; on the other n rows, the flag threshold τ is the k-th smallest
    flag score s = ℓ̂ (ties broken as ``estimator.flag_score`` does) with
    k = ⌈(1 − q)(n + 1)⌉, and an event is *flagged* when s(z) > τ. A
    :class:`~monitor.core.estimation.FlagRateTest` then tests H0: the flag rate is at most
    θ0 = q + ``tolerance`` on the stream, alarming when its wealth reaches 1/alpha.

    **Guarantee.** With no shift (stream events exchangeable with the threshold rows, given
    the fitted ℓ̂), the flags are i.i.d. Bernoulli(π) given τ, where π = P(ℓ̂(Z) > τ | τ)
    is at most a Beta(n + 1 − k, k) variable (its law when ℓ̂ has no ties; ties only lower
    π): E[π] ≤ q, but one calibration draw may give π above q. Hence

        P(any false alarm) ≤ alpha + P(Beta(n + 1 − k, k) > θ0) = alpha + ``threshold_risk``.

    ``tolerance=None`` takes θ0 as the upper ``alpha``-quantile of that Beta law (so the bound
    is 2 alpha), never below q. The guarantee needs no assumption on ℓ̂'s quality; a poor ℓ̂
    costs power, not validity. The detector sees only inputs: a concept shift (p(y | x)
    changed) that leaves the inputs' law unchanged is invisible to it; a covariate shift is
    flagged as harmful when it moves mass to where ℓ̂ is high, which is harm only as far as ℓ̂
    is right there.

    After an alarm the wealth restarts at 1 and monitoring goes on (a persisting harmful
    shift alarms again); the guarantee is that of the first alarm.

    Parameters
    ----------
    estimator
        An unfitted loss estimator (cloned, never mutated): ``CalibratedConfidence`` on class
        probabilities, ``AbsoluteErrorModel`` on :func:`with_prediction` rows, or another.
    calibration_Z, calibration_y
        Labelled calibration rows in the estimator's input form, and their labels.
    q
        Calibration flag rate, in (0, 1).
    tolerance
        θ0 − q >= 0, or None (see above).
    alpha
        The test's level, in (0, 1).
    fit_fraction
        Share of the calibration rows the estimator is fitted on; the rest sets τ and must
        hold at least ⌈1/q⌉ rows.
    seed
        Seeds the calibration split.
    forgetting
        The test's bettors' discount rates (:class:`FlagRateTest`).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(3)
    >>> def draw(n, hard=0.0):  # a classifier right with probability equal to its confidence
    ...     low = rng.uniform(size=n) < hard
    ...     c = np.where(low, rng.uniform(0.5, 0.7, n), rng.uniform(0.5, 1.0, n))
    ...     return np.c_[c, 1 - c], (rng.uniform(size=n) > c).astype(int)
    >>> Z, y = draw(2000)
    >>> detector = LabelFreeHarmDetector(CalibratedConfidence(), Z, y, q=0.1, alpha=0.01)
    >>> round(detector.null_rate, 3), round(detector.threshold_risk, 3)
    (0.123, 0.01)
    >>> detector.update_batch(draw(3000)[0])  # no shift: no alarm
    >>> detector.n_alarms
    0
    >>> detector.update_batch(draw(3000, hard=0.5)[0])  # half the events move to low confidence
    >>> [event.index for event in detector.last_alarms]  # 1 084 events after the shift, then again
    [4084, 4481, 5700]

    References
    ----------
    Amoukou, Bewley, Mishra, Lecue, Magazzeni, Veloso. *Sequential Harmful Shift Detection
    Without Labels.* NeurIPS 2024 (arXiv 2412.12910). Waudby-Smith & Ramdas. *Estimating
    means of bounded random variables by betting.* JRSS B 86(1), 2024. Vovk. *Conditional
    validity of inductive conformal predictors.* ACML 2012 (the Beta law of a split-conformal
    level).
    """

    def __init__(
        self,
        estimator: LossEstimator,
        calibration_Z: ArrayLike,
        calibration_y: ArrayLike,
        q: float = 0.1,
        tolerance: float | None = None,
        alpha: float = 0.01,
        fit_fraction: float = 0.5,
        seed: int | None = 0,
        forgetting: tuple[float, ...] = DEFAULT_FORGETTING,
    ) -> None:
        if not isinstance(estimator, LossEstimator):
            raise ValueError(f"estimator must be a LossEstimator, got {estimator!r}")
        check_unit_interval("q", q)
        check_unit_interval("alpha", alpha)
        if tolerance is not None and not (isinstance(tolerance, int | float)
                                          and 0.0 <= tolerance < 1.0 - q):
            raise ValueError(f"tolerance must be None or lie in [0, 1 - q), got {tolerance!r}")
        check_seed(seed)
        self.estimator = estimator
        self.q = q
        self.tolerance = tolerance
        self.alpha = alpha
        self.fit_fraction = fit_fraction
        self.seed = seed
        self.forgetting = tuple(forgetting)
        self._fit(*check_rows(calibration_Z, calibration_y, "calibration_Z"))

    def _fit(self, Z: FloatArray, y: np.ndarray) -> None:
        need = math.ceil(1.0 / self.q)
        fit, rest = split_calibration(Z.shape[0], self.fit_fraction, self.seed, min_rest=need)
        self._estimator = self.estimator.clone().fit(Z[fit], y[fit])
        losses = np.sort(self._estimator.flag_score(Z[rest]))
        n = losses.size
        k = math.ceil((1.0 - self.q) * (n + 1))
        if k > n:  # rounding at the edge of ``need``
            raise ValueError(f"q={self.q} needs more than {n} threshold rows")
        self._threshold = float(losses[k - 1])
        self._beta_shape = (n + 1 - k, k)
        null_rate = self.q + self.tolerance if self.tolerance is not None else max(
            self.q, float(beta_law.isf(self.alpha, *self._beta_shape)))
        self._test = FlagRateTest(null_rate, self.alpha, self.forgetting)
        self._init_lifecycle()

    def _init_lifecycle(self) -> None:
        self._phase = MONITORING
        self._n_seen = 0
        self._n_alarms = 0
        self._last_alarms: tuple[AlarmEvent, ...] = ()
        self._offset = 0  # absolute index of the first update since the last restart
        self._flags_since = 0  # flags counted since then
        self._flag = False

    # -------------------------------------------------------------------------- properties
    @property
    def threshold(self) -> float:
        """τ: an event is flagged when its predicted loss exceeds it."""
        return self._threshold

    @property
    def null_rate(self) -> float:
        """θ0 = q + tolerance: the flag rate the test holds as harmless."""
        return self._test.null_rate

    @property
    def threshold_risk(self) -> float:
        """P(Beta(n + 1 − k, k) > θ0): the chance that the threshold's own flag rate exceeds θ0
        (the false-alarm bound is alpha + this)."""
        return float(beta_law.sf(self.null_rate, *self._beta_shape))

    @property
    def flag(self) -> bool:
        """Whether the last event was flagged."""
        return self._flag

    @property
    def flag_rate(self) -> float:
        """Share of flagged events since the last restart (nan before any)."""
        n = self._n_seen - self._offset
        return self._flags_since / n if n else math.nan

    @property
    def log_statistic(self) -> float:
        """log of the test's wealth since the last restart."""
        return self._test.log_wealth

    @property
    def statistic(self) -> float:
        return math.exp(min(self.log_statistic, 690.0))

    @property
    def fitted_estimator(self) -> LossEstimator:
        """The estimator fitted on the calibration's fit part (its ``estimate`` of a window is
        the label-free estimate of the window's metric)."""
        return self._estimator

    def flags(self, Z: ArrayLike) -> np.ndarray:
        """Whether each row would be flagged; no state change."""
        return np.asarray(self._estimator.flag_score(as_matrix(Z, "Z")) > self._threshold)

    # ------------------------------------------------------------------------------ updates
    def update(self, z: ArrayLike) -> None:
        """One event (its row in the estimator's input form)."""
        self.update_batch(np.asarray(z, dtype=np.float64).reshape(1, -1))

    def update_batch(self, Z: ArrayLike, on_alarm: HarmAlarmCallback | None = None) -> None:
        """Events in order; exactly as many :meth:`update` calls (``last_alarms`` then holds
        every alarm of the batch; ``on_alarm(i, event)`` is called with each one's position)."""
        flags = self.flags(Z)
        self._last_alarms = ()
        i = 0
        while i < flags.size:
            hit = self._test.update_many(flags[i:])
            used = flags.size - i if hit is None else hit + 1
            self._count(flags[i:i + used])
            i += used
            if hit is not None:
                event = self._raise()
                if on_alarm is not None:
                    on_alarm(i - 1, event)
        if flags.size:
            self._flag = bool(flags[-1])

    def _count(self, flags: np.ndarray) -> None:
        self._n_seen += int(flags.size)
        self._flags_since += int(flags.sum())

    def _raise(self) -> AlarmEvent:
        index = self._n_seen - 1
        event = AlarmEvent(index, self._offset, self._test.log_wealth, self._test.log_threshold,
                           self._test.log_wealth)
        self._last_alarms = (*self._last_alarms, event)
        self._n_alarms += 1
        self._test.restart()
        self._offset = index + 1
        self._flags_since = 0
        return event

    # -------------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state; :meth:`from_state` continues exactly (the estimator refits from
        its own state where it must, see its class)."""
        return new_state(
            self, q=self.q, tolerance=self.tolerance, alpha=self.alpha,
            fit_fraction=self.fit_fraction, seed=self.seed, forgetting=list(self.forgetting),
            estimator=self._estimator.state_dict(), threshold=self._threshold,
            beta_shape=list(self._beta_shape), test=self._test.state_dict(),
            phase=self._phase, n_seen=self._n_seen, n_alarms=self._n_alarms,
            last_alarms=[a.to_json() for a in self._last_alarms], offset=self._offset,
            flags_since=self._flags_since, flag=self._flag,
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls.__new__(cls)
        est_state = state["estimator"]
        obj._estimator = _ESTIMATORS[est_state["class"]].from_state(est_state)
        obj.estimator = obj._estimator.clone()
        obj.q, obj.tolerance, obj.alpha = state["q"], state["tolerance"], state["alpha"]
        obj.fit_fraction, obj.seed = state["fit_fraction"], state["seed"]
        obj.forgetting = tuple(state["forgetting"])
        obj._threshold = float(state["threshold"])
        a, b = state["beta_shape"]
        obj._beta_shape = (int(a), int(b))
        obj._test = FlagRateTest.from_state(state["test"])
        obj._phase = str(state["phase"])
        obj._n_seen, obj._n_alarms = int(state["n_seen"]), int(state["n_alarms"])
        obj._last_alarms = tuple(AlarmEvent(**e) for e in state["last_alarms"])
        obj._offset, obj._flags_since = int(state["offset"]), int(state["flags_since"])
        obj._flag = bool(state["flag"])
        return obj

