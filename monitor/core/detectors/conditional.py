"""Conditional monitor: CTM / weighted CTM (WATCH) on conditional nonconformity scores s(x, y).

One class over ~500 lines, on purpose: its per-event and batch paths, its adaptation (the
density ratio's start, micro-batches, restarts) and its state codec act on the same fields and
must agree bit for bit (tests/detectors); the input transform lives in
:mod:`monitor.core.detectors.normal_scores`.
"""

from __future__ import annotations

import math
from typing import Any, Self, cast

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.detectors.base import (
    MONITORING,
    WARMING_UP,
    AlarmCallback,
    AlarmEvent,
    BatchTrace,
    FloatArray,
    MartingaleMonitor,
    as_matrix,
    as_row,
    check_choice,
    check_int,
    check_lifecycle,
    check_test_params,
    derive_seed,
)
from monitor.core.detectors.normal_scores import QuantileNormalizer
from monitor.core.martingales import ConformalPValue, batch
from monitor.core.martingales.density_ratio import OnlineDensityRatio
from monitor.core.martingales.state import check_state, new_state
from monitor.core.martingales.weighted import WeightedConformalPValue

__all__ = ["ADAPT_MODES", "RATIO_FEATURES", "ConditionalMonitor", "QuantileNormalizer"]

ADAPT_MODES: tuple[str, ...] = ("start", "on_signal")
#: How many points the weighted reference keeps beyond the calibration size
#: (``reference_window``): small enough that the weight refresh costs ≈ 50 µs per micro-batch
#: of 32 and the reference a few MB even at d = 50; large enough that a stream spans few
#: windows, since the approximation of the bounded reference grows with the number of windows
#: a stream spans (``docs/algorithms.md``, section 5).
DEFAULT_REFERENCE_WINDOW = 5000

RATIO_FEATURES: tuple[str, ...] = ("quantile", "raw")


class ConditionalMonitor(MartingaleMonitor):
    """Conformal test martingale on conditional scores s(x, y) (residuals, 1 − p̂(y|x)).

    ``weighted=False`` is the plain CTM (Vovk et al. 2021): it tests exchangeability of the
    (x, y) pairs, so it also alarms on benign covariate shifts when the scores depend on x (for
    example heteroscedastic residuals). ``weighted=True`` is WATCH's weighted CTM (Prinster et
    al. 2025, Sec. 4): every p-value weights the reference by an online estimate of the density
    ratio w(x) between the stream's inputs (target) and the calibration inputs (source), so that
    a covariate shift with unchanged p(y | x) keeps the p-values (approximately) uniform, while a
    test point outside the reference support gets a penalised p-value.

    ``adapt="start"`` (default) estimates the weights from the first event on; ``"on_signal"``
    is WATCH's adaptation start A: plain CTM p-values until :meth:`start_adaptation` (called
    when the covariate monitor alarms), then weights, with the martingale restarted at A when
    ``restart_on_adaptation``. On real data the x-only covariate monitor detects a mild tilt
    later than the CTM detects its effect on heteroscedastic residuals, so waiting for A lets
    the benign shift raise a harmful alarm; see ``docs/detectors.md`` for the measurements.

    Re-baselining after an alarm: the next ``rebaseline`` labelled events (score and x) become
    the fresh calibration and density-ratio source, the martingale restarts.

    Parameters
    ----------
    calibration_scores
        Conditional nonconformity scores of the labelled calibration events (larger = worse).
    calibration_X
        Their features, shape (m, d) (the density ratio's source sample); may be None when
        ``weighted=False``.
    weighted
        WCTM (True) or plain CTM (False).
    betting
        Betting function name. The default plug-in power (like Power and the Simple Mixture)
        bets only on *small* p-values — scores worse than the reference — while the jumpers
        also bet on large ones. Weighted p-values whose reference holds earlier target points
        are slightly conservative (too large) under a benign shift; a two-sided bet turns that
        into a "harmful" alarm. Its exponent is re-fitted to the recent p-values, so it
        re-adapts after a long quiet stretch: on the Shuttle benchmarks it detects concept
        shifts about twice as fast as the Simple Mixture, with as few harmful alarms on benign
        shifts (``docs/detectors.md``).
    rule, threshold, alpha
        As in :class:`~monitor.core.detectors.CovariateMonitor`.
    batch_size
        Micro-batch of the weighted p-values: weights are refreshed every ``batch_size`` events.
    penalty_alpha
        Penalise a p-value when the test point's normalised weight reaches this level.
    rebaseline, max_reference, seed
        As in :class:`~monitor.core.detectors.CovariateMonitor`. ``max_reference`` is only available
        with ``weighted=False``; the weighted monitor is bounded by ``reference_window``.
    adapt
        ``"start"`` or ``"on_signal"`` (see above).
    reference_window
        Weighted monitor: the reference keeps only the m + ``reference_window`` most recent
        points, the m calibration points leaving first (default
        :data:`DEFAULT_REFERENCE_WINDOW` = 5 000), so memory stays bounded on an endless stream;
        None keeps every event until the next alarm (memory grows without bound). Validity with
        the window is approximate, like the estimated weights: ``docs/algorithms.md``.
    restart_on_adaptation
        With ``adapt="on_signal"``: restart the martingale when adaptation starts.
    ratio_learning_rate
        SGD learning rate of the online density-ratio classifier.
    ratio_features
        What the density ratio sees: ``"quantile"`` (normal scores of x under the calibration
        ECDF, :class:`QuantileNormalizer`) or ``"raw"`` (x itself).
    ratio_columns
        With ``"quantile"``: which columns of x get normal scores (None: all); the others,
        a tabular stream's one-hot and missing-indicator columns, pass through as they are.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> cal_x = rng.normal(size=(500, 2))
    >>> monitor = ConditionalMonitor(np.abs(rng.normal(size=500)), cal_x, threshold=1000.0)
    >>> xs = rng.normal(size=(400, 2))
    >>> scores = np.abs(rng.normal(size=400)) * np.r_[np.ones(200), 3 * np.ones(200)]
    >>> for t, (x, s) in enumerate(zip(xs, scores)):  # the residuals triple at t = 200
    ...     monitor.update(x, s)
    ...     if monitor.alarm:
    ...         break
    >>> t, monitor.changepoint, monitor.adapting
    (203, 202, True)

    References
    ----------
    Prinster, Han, Liu, Saria. *WATCH: Adaptive Monitoring for AI Deployments via
    Weighted-Conformal Martingales.* ICML 2025. Tibshirani, Barber, Candès, Ramdas. *Conformal
    prediction under covariate shift.* NeurIPS 2019.
    """

    def __init__(
        self,
        calibration_scores: ArrayLike,
        calibration_X: ArrayLike | None,
        weighted: bool = True,
        betting: str = "plug_in_power",
        rule: str = "shiryaev_roberts",
        threshold: float = 10_000.0,
        alpha: float = 0.01,
        batch_size: int = 32,
        penalty_alpha: float = 0.1,
        rebaseline: int = 300,
        max_reference: int | None = None,
        seed: int | None = 0,
        adapt: str = "start",
        reference_window: int | None = DEFAULT_REFERENCE_WINDOW,
        restart_on_adaptation: bool = True,
        ratio_features: str = "quantile",
        ratio_learning_rate: float = 0.05,
        ratio_columns: ArrayLike | None = None,
    ) -> None:
        check_test_params(betting, rule, threshold, alpha)
        _check_params(weighted, batch_size, penalty_alpha, rebaseline, max_reference, seed)
        check_choice("adapt", adapt, ADAPT_MODES)
        check_int("reference_window", reference_window, 1, allow_none=True)
        check_choice("ratio_features", ratio_features, RATIO_FEATURES)
        if not isinstance(restart_on_adaptation, bool):
            raise ValueError(
                f"restart_on_adaptation must be True or False, got {restart_on_adaptation!r}"
            )
        if not (isinstance(ratio_learning_rate, int | float) and ratio_learning_rate > 0):
            raise ValueError(f"ratio_learning_rate must be > 0, got {ratio_learning_rate!r}")
        self.calibration_scores: ArrayLike | None = calibration_scores
        self.calibration_X: ArrayLike | None = calibration_X
        self.weighted = weighted
        self.betting = betting
        self.rule = rule
        self.alpha = alpha
        self.batch_size = batch_size
        self.penalty_alpha = penalty_alpha
        self.rebaseline = rebaseline
        self.max_reference = max_reference
        self.seed = seed
        self.adapt = adapt
        self.reference_window = reference_window
        self.restart_on_adaptation = restart_on_adaptation
        self.ratio_features = ratio_features
        self.ratio_columns = None if ratio_columns is None else [
            bool(c) for c in np.asarray(ratio_columns, dtype=bool).tolist()]
        self.ratio_learning_rate = ratio_learning_rate

        self._threshold_arg = threshold
        self._init_test(betting, rule, threshold, alpha)
        scores, X = _calibration(calibration_scores, calibration_X, weighted)
        self._n_features = 0 if X is None else X.shape[1]
        self._pv = self._new_p_values(scores, X)
        self._warmup_scores: list[float] = []
        self._warmup_X: list[list[float]] = []
        self._pending_adaptation = False
        self._adapt_from_start()

    def _new_p_values(
        self, scores: FloatArray, X: FloatArray | None
    ) -> ConformalPValue | WeightedConformalPValue:
        seed = derive_seed(self.seed, 2, self._n_alarms)
        self._transform: QuantileNormalizer | None = None
        if not self.weighted or X is None:
            return ConformalPValue(scores, seed=seed, max_reference=self.max_reference)
        if self.ratio_features == "quantile":
            self._transform = QuantileNormalizer(X, self.ratio_columns)
            X = self._transform(X)
        ratio = OnlineDensityRatio(
            self._n_features,
            seed=derive_seed(self.seed, 3, self._n_alarms),
            learning_rate=float(self.ratio_learning_rate),
        )
        return WeightedConformalPValue(
            scores,
            X,
            ratio,
            batch_size=self.batch_size,
            penalty_alpha=self.penalty_alpha,
            seed=seed,
            window=self.reference_window,
        )

    # -------------------------------------------------------------------------- properties
    @property
    def adapting(self) -> bool:
        """Whether the weighted p-values currently use the estimated density ratio."""
        return isinstance(self._pv, WeightedConformalPValue) and self._pv.adapting

    @property
    def penalised(self) -> bool:
        """Whether the last p-value was penalised (test point outside the reference support)."""
        return isinstance(self._pv, WeightedConformalPValue) and self._pv.penalised

    @property
    def penalised_fraction(self) -> float:
        """Share of penalised p-values since adaptation started (0 when not adapting)."""
        return self._pv.penalised_fraction if isinstance(self._pv, WeightedConformalPValue) else 0.0

    @property
    def weights_ess(self) -> float:
        """Effective sample size (Σw)²/Σw² of the reference weights (the reference size when
        not adapting)."""
        if isinstance(self._pv, WeightedConformalPValue):
            return float(self._pv.weights_ess)
        return float(self._pv.n_reference)

    @property
    def density_ratio_coefficients(self) -> FloatArray | None:
        """The density ratio's logistic coefficients, one per feature (on the standardised
        inputs it sees: normal scores with ``ratio_features="quantile"``), while adapting;
        else None."""
        if not (isinstance(self._pv, WeightedConformalPValue) and self._pv.adapting):
            return None
        lin = self._pv.density_ratio.linear_params()
        d = (lin.size - 5) // 3
        return np.array(lin[5 + 2 * d :], np.float64)

    @property
    def n_reference(self) -> int:
        """Number of reference scores the next p-value is compared with."""
        return int(self._pv.n_reference)

    # ---------------------------------------------------------------------------- updates
    def start_adaptation(self) -> None:
        """Start weighting by the estimated density ratio (the covariate monitor alarmed).

        A no-op for the unweighted CTM and when already adapting; deferred to the end of the
        warm-up when re-baselining.
        """
        if not self.weighted or self.adapting:
            return
        if self._phase == WARMING_UP:
            self._pending_adaptation = True
        elif self._phase == MONITORING:
            self._adapt()

    def _adapt(self) -> None:
        assert isinstance(self._pv, WeightedConformalPValue)
        self._pv.start_adaptation()
        if self.restart_on_adaptation:
            self._test.restart(self._n_seen)

    def _adapt_from_start(self) -> None:
        if self.weighted and self.adapt == "start":
            assert isinstance(self._pv, WeightedConformalPValue)
            self._pv.start_adaptation()

    def update(self, x: ArrayLike | None, score: float) -> None:
        """One labelled event: features ``x`` and its conditional nonconformity ``score``."""
        score = _check_score(score)
        self._step(self._row(x), score)

    def _update_row(self, row: FloatArray | None, score: float) -> None:
        """:meth:`update` with features already checked by ``as_row`` (the caller's job; a
        stream checks each event once), ignored when not weighted."""
        score = _check_score(score)
        self._step(self._row(row, checked=True), score)

    def _step(self, row: FloatArray | None, score: float) -> None:
        self._start_update()
        index = self._n_seen
        self._n_seen += 1
        self._p_value = math.nan
        if self._phase == MONITORING:
            self._bet(index, score, row)
        elif self._phase == WARMING_UP:
            self._collect(score, row)

    def _row(self, x: ArrayLike | None, checked: bool = False) -> FloatArray | None:
        """The event's features as a checked (1, d) row; ``None`` when not weighted."""
        if not self.weighted:
            return None
        if x is None:
            raise ValueError("the weighted monitor needs the features x of every event")
        return cast(FloatArray, x) if checked else as_row(x, self._n_features)

    def _bet(self, index: int, score: float, row: FloatArray | None) -> None:
        if isinstance(self._pv, WeightedConformalPValue):
            assert row is not None
            self._pv.update(score, (row if self._transform is None else self._transform(row))[0])
        else:
            self._pv.update(score)
        self._p_value = self._pv.p_value
        if self._test.step(self._p_value):
            self._raise(self._test.alarm_event(index))

    def _collect(self, score: float, row: FloatArray | None) -> None:
        self._collect_many([score], None if row is None else [row[0].tolist()])

    def _collect_many(self, scores: list[float], rows: list[list[float]] | None) -> None:
        """Warm-up events (per event or a batch that fills at most the rest of the window)."""
        self._warmup_scores.extend(scores)
        if rows is not None:
            self._warmup_X.extend(rows)
        if len(self._warmup_scores) < self.rebaseline:
            return
        X = np.asarray(self._warmup_X, dtype=np.float64) if self.weighted else None
        self._pv = self._new_p_values(np.asarray(self._warmup_scores), X)
        self._warmup_scores, self._warmup_X = [], []
        self._resume()
        self._adapt_from_start()
        if self._pending_adaptation:
            self._pending_adaptation = False
            self._adapt()

    # ------------------------------------------------------------------------ batch updates
    def update_batch(
        self, X: FloatArray | None, scores: FloatArray, on_alarm: AlarmCallback | None = None
    ) -> BatchTrace:
        """Labelled events in order, bit for bit as repeated :meth:`_update_row` (``X`` rows
        checked by the caller, as by ``as_row``; ``X`` may be None when not weighted).

        Weighted or plain conformal p-values, betting and the alarm rule run in compiled spans
        (at most one micro-batch of the weighted p-values each) that stop at an alarm;
        re-baselining and warm-up happen inside the batch. ``on_alarm(i, event)`` is called
        right after the update at batch position i that raised ``event``, the monitor then as
        after that update; afterwards ``last_alarms`` lists every alarm of the batch. Returns
        the properties after each update.
        """
        s = np.ascontiguousarray(scores, dtype=np.float64).reshape(-1)
        n = s.size
        if np.isnan(s).any():
            raise ValueError("score is NaN; a nonconformity score must be a number")
        rows: FloatArray | None = None
        if self.weighted:
            if X is None:
                raise ValueError("the weighted monitor needs the features x of every event")
            rows = np.ascontiguousarray(X, dtype=np.float64)
            if rows.shape != (n, self._n_features):
                raise ValueError(f"X must have shape ({n}, {self._n_features}), got {rows.shape}")
        trace = BatchTrace.empty(n, conditional=True)
        alarms: list[AlarmEvent] = []
        self._start_update()
        self._batch_rows: tuple[object, int, FloatArray] | None = None
        def collect(start: int, stop: int) -> None:
            self._collect_many(s[start:stop].tolist(),
                               None if rows is None else rows[start:stop].tolist())

        self._batch_phases(
            n, trace, on_alarm,
            monitor_span=lambda i: self._monitor_span(rows, s, i, n, trace, alarms),
            warmup_left=lambda: self.rebaseline - len(self._warmup_scores),
            collect=collect,
        )
        self._batch_rows = None
        self._last_alarms = tuple(alarms)
        return trace

    def _trace_idle(self, trace: BatchTrace, start: int, stop: int) -> None:
        super()._trace_idle(trace, start, stop)
        assert trace.weights_ess is not None and trace.penalised is not None
        trace.weights_ess[start:stop] = self.weights_ess
        trace.penalised[start:stop] = self.penalised

    def _trace_now(self, trace: BatchTrace, i: int) -> None:
        super()._trace_now(trace, i)
        assert trace.weights_ess is not None and trace.penalised is not None
        trace.weights_ess[i] = self.weights_ess
        trace.penalised[i] = self.penalised

    def _ratio_rows(self, rows: FloatArray, i: int) -> FloatArray:
        """The density ratio's view of the batch rows (quantile transform or raw); row i of the
        result is batch row i. Transformed once per batch and transform."""
        if self._transform is None:
            return rows
        cached = self._batch_rows
        if cached is None or cached[0] is not self._transform or cached[1] > i:
            out = np.empty_like(rows)
            out[i:] = self._transform(rows[i:])
            self._batch_rows = cached = (self._transform, i, out)
        return cached[2]

    def _monitor_span(
        self, rows: FloatArray | None, scores: FloatArray, i: int, n: int, trace: BatchTrace,
        alarms: list[AlarmEvent],
    ) -> tuple[int, AlarmEvent | None]:
        """Monitor events i.. until an alarm or the end of a compiled span; (used, alarm)."""
        pv, test = self._pv, self._test
        assert trace.weights_ess is not None and trace.penalised is not None
        ps, ess = trace.p_value, trace.weights_ess
        if isinstance(pv, WeightedConformalPValue) and batch.supports_betting(test.betting):
            assert rows is not None
            xt = self._ratio_rows(rows, i)
            if pv._adapting:
                got = self._weighted_span(pv, xt, scores, i, n, trace)
                used, alarm = batch.run_test(test.betting, test.rule, ps, i, i + got,
                                              trace.log_martingale, trace.log_statistic)
                self._weighted_commit(pv, trace, i, got, used)
            else:
                plain = pv._plain
                used, alarm = batch.plain_span(plain, scores, i, n, test.betting, test.rule,
                                                trace)
                pv._p_value = plain.p_value
                pv.density_ratio._add_sources(xt[i : i + used])
                pv._reserve(used)
                m = pv._n
                pv._scores[m : m + used] = scores[i : i + used]
                pv._columns[:, m : m + used] = xt[i : i + used].T
                pv._n = m + used
                ess[i : i + used] = np.arange(m + 1, m + used + 1, dtype=np.float64)
                trace.penalised[i : i + used] = pv._penalised
        elif isinstance(pv, ConformalPValue) and batch.supports_betting(test.betting):
            m = pv.n_reference
            got = batch.pvalue_span(pv, scores, i, n, ps)
            used, alarm = batch.run_test(test.betting, test.rule, ps, i, i + got,
                                          trace.log_martingale, trace.log_statistic)
            batch.pvalue_commit(pv, got, used, float(ps[i + used - 1]))
            ess[i : i + used] = np.arange(m + 1, m + used + 1, dtype=np.float64)
            trace.penalised[i : i + used] = False
        else:  # the exact per-event steps (a betting function without a compiled step)
            index = self._n_seen
            self._n_seen += 1
            self._p_value = math.nan
            self._last_alarms = ()
            self._bet(index, float(scores[i]), None if rows is None else rows[i : i + 1])
            self._trace_now(trace, i)
            event = self._last_alarms[0] if self._last_alarms else None
            if event is not None:
                alarms.append(event)
            return 1, event
        self._p_value = float(ps[i + used - 1])
        return self._end_span(used, alarm, alarms)

    def _weighted_span(
        self, pv: WeightedConformalPValue, xt: FloatArray, scores: FloatArray, i: int, n: int,
        trace: BatchTrace,
    ) -> int:
        """Tentative weighted p-values of events i.. up to the end of the micro-batch."""
        assert trace.weights_ess is not None and trace.penalised is not None
        k0 = pv._n_pend
        us = batch.peek_uniforms(pv._plain, min(n - i, pv._batch - k0))
        while pv._pend.shape[0] < k0 + us.size:  # grown as the per-event path grows it
            pv._pend = np.concatenate([pv._pend, np.zeros_like(pv._pend)])
        got = int(batch.weighted_span(
            xt, pv._lin, pv._pend, pv._ref, pv._n, k0, scores, us, pv._grow, pv._alpha,
            pv._sum_w2, trace.p_value, trace.penalised, trace.weights_ess, i, i + us.size,
        ))
        if got == 0:
            raise ValueError(f"x must be {pv._d} finite numbers, got {xt[i].tolist()!r}")
        return got

    def _weighted_commit(
        self, pv: WeightedConformalPValue, trace: BatchTrace, i: int, got: int, used: int
    ) -> None:
        """Keep the first ``used`` of ``got`` tentative weighted updates."""
        assert trace.weights_ess is not None and trace.penalised is not None
        batch.drop_uniforms(pv._plain, used)
        last = i + used - 1
        pv._p_value = float(trace.p_value[last])
        pv._penalised = bool(trace.penalised[last])
        pv._n_adapt += used
        pv._n_penalised += int(np.count_nonzero(trace.penalised[i : i + used]))
        pv._n_pend += used
        if pv._n_pend >= pv._batch:
            pv._end_batch()
            trace.weights_ess[last] = pv.weights_ess

    # ---------------------------------------------------------------------------- state
    def clone(self) -> ConditionalMonitor:
        """A new monitor with the same parameters and calibration, in its initial state."""
        if self.calibration_scores is None:
            raise ValueError("a monitor restored with from_state has no calibration to clone")
        return ConditionalMonitor(self.calibration_scores, self.calibration_X, **self._params())

    def _params(self) -> dict[str, Any]:
        return {
            "weighted": self.weighted,
            "betting": self.betting,
            "rule": self.rule,
            "threshold": self._threshold_arg,
            "alpha": self.alpha,
            "batch_size": self.batch_size,
            "penalty_alpha": self.penalty_alpha,
            "rebaseline": self.rebaseline,
            "max_reference": self.max_reference,
            "seed": self.seed,
            "adapt": self.adapt,
            "reference_window": self.reference_window,
            "restart_on_adaptation": self.restart_on_adaptation,
            "ratio_features": self.ratio_features,
            "ratio_learning_rate": self.ratio_learning_rate,
            # a tabular stream's numeric columns (absent from the state of a numeric stream)
            **({} if self.ratio_columns is None else {"ratio_columns": self.ratio_columns}),
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state; :meth:`from_state` continues exactly (no calibration arrays)."""
        return new_state(
            self,
            params=self._params(),
            n_features=self._n_features,
            transform=None if self._transform is None else self._transform.state(),
            p_values=self._pv.state_dict(),
            warmup_scores=np.asarray(self._warmup_scores, dtype=np.float64),
            warmup_X=np.asarray(self._warmup_X, dtype=np.float64).reshape(
                len(self._warmup_X), self._n_features
            ),
            pending_adaptation=self._pending_adaptation,
            monitor=self._monitor_state(),
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild a monitor saved with :meth:`state_dict` (calibration arguments are None)."""
        check_state(state, cls)
        obj = cls.__new__(cls)
        params = dict(state["params"])
        obj._threshold_arg = params.pop("threshold")
        obj.reference_window = None  # states saved before the window: the unbounded reference
        obj.ratio_columns = None
        for name, value in params.items():
            setattr(obj, name, value)
        obj.calibration_scores, obj.calibration_X = None, None
        obj._n_features = int(state["n_features"])
        transform = state["transform"]
        obj._transform = None if transform is None else QuantileNormalizer.load(transform)
        pv_cls = WeightedConformalPValue if obj.weighted else ConformalPValue
        obj._pv = pv_cls.from_state(state["p_values"])
        obj._warmup_scores = np.asarray(state["warmup_scores"], dtype=np.float64).tolist()
        obj._warmup_X = np.asarray(state["warmup_X"], dtype=np.float64).tolist()
        obj._pending_adaptation = bool(state["pending_adaptation"])

        obj._load_monitor_state(state["monitor"])
        return obj


def _check_score(score: float) -> float:
    score = float(score)
    if math.isnan(score):
        raise ValueError("score is NaN; a nonconformity score must be a number")
    return score


def _calibration(
    scores: ArrayLike, X: ArrayLike | None, weighted: bool
) -> tuple[FloatArray, FloatArray | None]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.size < 2 or not np.isfinite(s).all():
        raise ValueError(f"calibration_scores must be >= 2 finite numbers, got {s.size} values")
    if X is None:
        if weighted:
            raise ValueError("the weighted monitor needs calibration_X (the density ratio source)")
        return s, None
    arr = as_matrix(X, "calibration_X")
    if arr.shape[0] != s.size:
        raise ValueError(f"{s.size} calibration scores but {arr.shape[0]} calibration_X rows")
    return s, arr


def _check_params(
    weighted: object,
    batch_size: object,
    penalty_alpha: object,
    rebaseline: object,
    max_reference: object,
    seed: object,
) -> None:
    if not isinstance(weighted, bool):
        raise ValueError(f"weighted must be True or False, got {weighted!r}")
    check_int("batch_size", batch_size, 1)
    if not (isinstance(penalty_alpha, int | float) and 0.0 < penalty_alpha <= 1.0):
        raise ValueError(f"penalty_alpha must lie in (0, 1], got {penalty_alpha!r}")
    check_lifecycle(rebaseline, max_reference, seed)
    if weighted and max_reference is not None:
        raise ValueError(
            "max_reference (quantized bounded memory) is only available with weighted=False: the "
            "weighted monitor bounds its reference with reference_window"
        )
