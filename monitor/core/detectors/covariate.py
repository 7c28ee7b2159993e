"""Covariate monitor: a conformal test martingale on an x-only score (docs/detectors.md)."""

from __future__ import annotations

import collections
import math
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike
from threadpoolctl import threadpool_limits

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
    check_int,
    check_lifecycle,
    check_test_params,
    derive_seed,
    window_mean,
)
from monitor.core.martingales import ConformalPValue, batch
from monitor.core.martingales.state import check_state, new_state
from monitor.core.ood import Scorer, make_scorer, reference_bank, scorer_from_state

__all__ = ["LIMIT_BINS", "LIMIT_EDGES", "PREPARED_ROWS", "TABULAR_SCORERS", "CovariateMonitor"]

#: Most rows whose score :meth:`CovariateMonitor.prepare` keeps (oldest dropped first): a few
#: poll batches, so that a delayed label's support check still finds its prediction's score.
PREPARED_ROWS = 8192

#: With ``reference_limit``: the bins of the bounded reference, and how many scores after the
#: limit fix their edges (quantiles at k/1000 of 2 000 scores: two per bin). Checkpoint: the
#: 1 000 bin counts instead of 8 bytes per score.
LIMIT_BINS = 1000
LIMIT_EDGES = 2000

#: Defaults for scorers given by name: the tabular x-only scores of docs/detectors.md (1-NN
#: distance in standardised feature space; Mahalanobis distance to the calibration mean).
TABULAR_SCORERS: dict[str, dict[str, Any]] = {
    "knn": {"standardize": True, "normalize": False, "k": 1},
    "mahalanobis": {"standardize": True},
}


def _make_scorer(scorer: Scorer | str) -> Scorer:
    """A fresh, unfitted scorer: by name (tabular defaults) or a clone of the given one."""
    if isinstance(scorer, str):
        return make_scorer(scorer, **TABULAR_SCORERS.get(scorer, {}))
    if isinstance(scorer, Scorer):
        return make_scorer(scorer.name, **scorer.get_params())
    raise ValueError(f"scorer must be a monitor.core.ood Scorer or a scorer name, got {scorer!r}")


class CovariateMonitor(MartingaleMonitor):
    """Conformal test martingale on the x-only nonconformity −score(x) of an OOD scorer.

    **Exchangeability.** A score fitted on the very points it is compared with is not
    exchangeable with a test point's score (a calibration point is its own nearest neighbour).
    The calibration features are therefore split at random: the scorer is fitted on a fraction
    ``fit_fraction`` of them, the conformal reference is the nonconformity of the *other* part,
    and test points are scored by the same fitted scorer. Given the fitted scorer, reference and
    test scores are then i.i.d. under no shift, so the smoothed p-values are i.i.d. uniform (ALRW
    2nd ed., Theorem 11.1) and the martingale is a test martingale. Each test score joins the
    reference after its p-value (the online CTM).

    **Re-baselining.** After an alarm the next ``rebaseline`` scores (with the same fitted
    scorer) become the fresh reference, the martingale and the rule restart, and monitoring
    resumes; no alarm is possible during this warm-up. ``rebaseline=0`` stops monitoring after
    the first alarm. See ``docs/detectors.md`` for why this keeps validity for the new regime.

    Parameters
    ----------
    scorer
        A :mod:`monitor.core.ood` scorer (it is cloned, never mutated) or its name; by name, ``knn``
        and ``mahalanobis`` use the tabular defaults of :data:`TABULAR_SCORERS`.
    calibration_X
        Calibration inputs of the scorer's kind, shape (m, d), m >= 4.
    betting
        Betting function name (``simple_jumper``, ``composite_jumper``, ``power``, ``mixture``,
        ``agrapa``, ``plug_in_power``).
    rule, threshold, alpha
        The alarm rule as in :class:`monitor.streams.config.AlarmConfig`: ``ville`` alarms at S ≥
        1/alpha;
        ``cusum`` and ``shiryaev_roberts`` at statistic ≥ threshold (mean run length ≥ threshold).
    rebaseline
        Warm-up window after an alarm (0 = stop after the first alarm, else >= 2).
    max_reference
        None keeps every score; an integer bounds the reference memory (quantized reference of
        :class:`monitor.core.martingales.ConformalPValue`).
    reference_limit
        None keeps every score until the next alarm. An integer L keeps every score, exactly as
        None does, until the reference holds L scores; the next :data:`LIMIT_EDGES` updates
        then compute no p-value (the martingale waits, it does not restart) and their scores
        fix the edges of :data:`LIMIT_BINS` bins; from then on the reference is bin counts
        (:meth:`~monitor.core.martingales.ConformalPValue.quantize`): memory O(bins), exactly
        valid (docs/algorithms.md, "Bounded reference after a limit"). Again after each
        re-baseline. Not with ``max_reference`` (quantized from the start).
    reference_bank
        None fits the scorer on all ``fit_fraction`` rows. An integer B fits it on a seeded
        random subsample of at most B of them (:func:`monitor.core.ood.reference_bank`): a kNN
        score then costs at most B distances per input whatever the calibration size; the
        subsample is exchangeable with the other rows, so validity is unchanged.
    seed
        Seeds the calibration split and the p-values' tie-breaking uniforms.
    fit_fraction
        Share of the calibration rows used to fit the scorer, in (0, 1); the rest (>= 2 rows)
        is the conformal reference.
    support_level
        An input is *outside the calibration support* when either of two conformal tests
        against the calibration rows rejects at this level: its x-only p-value against the
        reference, (1 + #{j: s_j ≥ s})/(m + 1) ≤ ``support_level``; or, for some coordinate k,
        the two-sided rank p-value of |x_k − median_k| among the reference rows is at most
        max(``support_level``/d, 1/(m + 1)) (Bonferroni, but at least "beyond every reference
        value of that coordinate", as with m = 500, d = 5). Under no shift they fire with
        probability ≤ ``support_level`` and ≤ max(``support_level``, d/(m + 1)). The
        coordinate test keeps the notion robust when a few wild calibration rows (a sensor
        glitch) inflate the x-only scores of the reference; the diagnosis uses it.
    support_history
        How many recent support flags are kept for the diagnosis (:meth:`outside_fraction`).
    outside_columns
        Columns of the inputs that are 0 on every calibration row (a tabular stream's
        unseen-category columns, docs/tabular.md): an input with a nonzero value in one has a
        value no calibration row has, and is outside the calibration support. Under no shift
        it cannot happen (every calibration row has 0 there).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(1)
    >>> monitor = CovariateMonitor("knn", rng.normal(size=(400, 3)), threshold=1000.0, seed=0)
    >>> stream = np.vstack([rng.normal(size=(300, 3)), rng.normal(3.0, 1.0, size=(100, 3))])
    >>> for t, x in enumerate(stream):
    ...     monitor.update(x)
    ...     if monitor.alarm:
    ...         break
    >>> t, monitor.changepoint, monitor.phase
    (313, 307, 'warming_up')

    References
    ----------
    Vovk, Gammerman, Shafer. *Algorithmic Learning in a Random World*, 2nd ed. (2022), Ch. 8-9.
    Vovk et al. *Retrain or not retrain: conformal test martingales for change-point detection.*
    COPA 2021. Prinster et al. *WATCH.* ICML 2025, Sec. 4.
    """

    def __init__(
        self,
        scorer: Scorer | str,
        calibration_X: ArrayLike,
        betting: str = "composite_jumper",
        rule: str = "shiryaev_roberts",
        threshold: float = 10_000.0,
        alpha: float = 0.01,
        rebaseline: int = 300,
        max_reference: int | None = None,
        seed: int | None = 0,
        fit_fraction: float = 0.5,
        support_level: float = 0.01,
        support_history: int = 10_000,
        outside_columns: tuple[int, ...] = (),
        reference_limit: int | None = None,
        reference_bank: int | None = None,
    ) -> None:
        check_test_params(betting, rule, threshold, alpha)
        check_lifecycle(rebaseline, max_reference, seed)
        check_int("reference_limit", reference_limit, 2, allow_none=True)
        check_int("reference_bank", reference_bank, 1, allow_none=True)
        if reference_limit is not None and max_reference is not None:
            raise ValueError(
                "reference_limit and max_reference exclude each other: max_reference quantizes "
                "the reference from the start; set one of them"
            )
        check_int("support_history", support_history, 1)
        if not (isinstance(fit_fraction, int | float) and 0.0 < fit_fraction < 1.0):
            raise ValueError(f"fit_fraction must lie in (0, 1), got {fit_fraction!r}")
        if not (isinstance(support_level, int | float) and 0.0 < support_level < 1.0):
            raise ValueError(f"support_level must lie in (0, 1), got {support_level!r}")
        self.scorer = scorer
        self.calibration_X: ArrayLike | None = calibration_X
        self.betting = betting
        self.rule = rule
        self.alpha = alpha
        self.rebaseline = rebaseline
        self.max_reference = max_reference
        self.seed = seed
        self.fit_fraction = fit_fraction
        self.support_level = support_level
        self.support_history = support_history
        self.outside_columns = tuple(int(j) for j in outside_columns)
        self.reference_limit = reference_limit
        self.reference_bank = reference_bank
        self._threshold_arg = threshold
        self._init_test(betting, rule, threshold, alpha)
        self._fit(as_matrix(calibration_X, "calibration_X", min_rows=4))

    def _fit(self, X: FloatArray) -> None:
        n_fit = round(self.fit_fraction * X.shape[0])
        if not 1 <= n_fit <= X.shape[0] - 2:
            raise ValueError(
                f"fit_fraction={self.fit_fraction} leaves no room for both parts of "
                f"{X.shape[0]} calibration rows (need >= 1 to fit and >= 2 for the reference)"
            )
        order = np.random.default_rng(derive_seed(self.seed, 0)).permutation(X.shape[0])
        bank = order[:n_fit]
        keep = reference_bank(n_fit, self.reference_bank, derive_seed(self.seed, 2))
        self._scorer = _make_scorer(self.scorer).fit(X[bank if keep is None else bank[keep]])
        # One BLAS thread, as the worker scores (monitor/engine/worker.py): a multi-threaded
        # product rounds differently, so the API, the CLI and a worker process building the same
        # stream would start from references that differ in their last bits (a kNN distance
        # to a duplicate row is the square root of rounding noise: ~1e-8 on tabular embeddings).
        with threadpool_limits(limits=1, user_api="blas"):
            reference = -self._scorer.score(X[order[n_fit:]])
        self._n_features = X.shape[1]
        self._support_threshold = _upper_threshold(reference, self.support_level)
        self._center = np.median(X[order[:n_fit]], axis=0)
        deviation = np.abs(X[order[n_fit:]] - self._center)
        # Bonferroni over the d coordinates; at least "beyond every reference value" (1/(m + 1)).
        level = max(self.support_level / X.shape[1], 1.0 / (deviation.shape[0] + 1))
        self._limits = np.array([_upper_threshold(col, level) for col in deviation.T])
        self._support: collections.deque[bool] = collections.deque(maxlen=self.support_history)
        self._prepared: dict[bytes, tuple[float, bool]] = {}
        self._warmup: list[float] = []
        #: The scores that will fix the bins after ``reference_limit`` (None: not collecting).
        self._edges: list[float] | None = None
        self._pv: ConformalPValue | None = self._new_p_values(reference)

    def _new_p_values(self, reference: FloatArray) -> ConformalPValue:
        # A fresh generator per reference (not ConformalPValue.reset): the uniforms then do not
        # depend on how many p-values the batch path computed past an alarm.
        seed = derive_seed(self.seed, 1, self._n_alarms)
        return ConformalPValue(reference, seed=seed, max_reference=self.max_reference)

    # -------------------------------------------------------------------------- properties
    @property
    def outside_support(self) -> bool:
        """Whether the last input was outside the calibration support (see ``support_level``)."""
        return bool(self._support[-1]) if self._support else False

    @property
    def n_features(self) -> int:
        """Width of the inputs (that of the calibration inputs)."""
        return self._n_features

    @property
    def support_threshold(self) -> float:
        """Nonconformity above which an input is outside the calibration support."""
        return self._support_threshold

    def is_outside(self, X: ArrayLike) -> np.ndarray:
        """Whether each row of ``X`` is outside the calibration support; no state change."""
        arr = as_matrix(X, "X")
        if arr.shape[0] == 1:
            return np.array([self._score_row(arr)[1]])
        return self._outside(arr, self._nonconformity(arr))

    def _is_outside_row(self, row: FloatArray) -> bool:
        """:meth:`is_outside` of one row already checked by ``as_row`` (the caller's job)."""
        return self._score_row(row)[1]

    def _outside(self, X: FloatArray, scores: FloatArray) -> np.ndarray:
        beyond = np.any(np.abs(X - self._center) > self._limits, axis=1)
        if self.outside_columns:  # definitive: a value no calibration row has
            beyond |= np.any(X[:, self.outside_columns] != 0.0, axis=1)
        return np.asarray((scores > self._support_threshold) | beyond)

    def track_support(self, X: ArrayLike) -> None:
        """Count the rows of ``X`` as updates for the support flags only (:meth:`is_outside`;
        no p-value, no bet, no alarm): a monitor replaced by a new configuration version keeps
        the flags its pending alarms' diagnosis still reads
        (:meth:`~monitor.streams.detectors.StreamDetectors.track_pending`)."""
        flags = self.is_outside(X).tolist()
        self._support.extend(flags)
        self._n_seen += len(flags)

    def outside_fraction(self, start: int, stop: int | None = None) -> float:
        """Share of inputs with absolute index in [start, stop] outside the calibration support
        (over the last ``support_history`` inputs; nan if none of them is in the range)."""
        last = self._n_seen - 1 if stop is None else stop
        return window_mean(self._support, self._n_seen, start, last)

    # ---------------------------------------------------------------------------- updates
    def nonconformity(self, X: ArrayLike) -> FloatArray:
        """−score of each row of ``X`` (larger = stranger); no state change."""
        return self._nonconformity(as_matrix(X, "X"))

    def _nonconformity(self, X: FloatArray) -> FloatArray:
        # Row by row in a fixed order (``Scorer.score_rows``): a row's score does not depend on
        # the rows scored with it, so per-event, prepared and batch updates agree bit for bit
        # whatever the batches.
        return -self._scorer.score_rows(X)

    def prepare(self, X: ArrayLike) -> None:
        """Score rows that are about to arrive, all at once; no state change.

        :meth:`update` and :meth:`is_outside` then look the score and support flag of such a
        row up instead of computing them alone: one matrix product per poll batch instead of
        two per event (the score and the support check of its label). Results are identical:
        a row's score does not depend on the rows scored with it (:meth:`_nonconformity`).
        The last :data:`PREPARED_ROWS` rows are kept; they are not part of the state.
        """
        arr = as_matrix(X, "X")
        if arr.shape[1] != self._n_features:
            raise ValueError(f"X must have {self._n_features} columns, got {arr.shape[1]}")
        scores = self._nonconformity(arr)
        flags = self._outside(arr, scores).tolist()
        prepared = self._prepared
        for row, score, flag in zip(arr, scores.tolist(), flags, strict=True):
            prepared[row.tobytes()] = (score, flag)
        for _ in range(len(prepared) - PREPARED_ROWS):
            del prepared[next(iter(prepared))]  # dicts keep insertion order: oldest first

    def _score_row(self, row: FloatArray) -> tuple[float, bool]:
        """Nonconformity and support flag of one (1, d) row: prepared, else computed."""
        found = self._prepared.get(row.tobytes())
        if found is not None:
            return found
        scores = self._nonconformity(row)
        return float(scores[0]), bool(self._outside(row, scores)[0])

    def update(self, x: ArrayLike) -> None:
        """Score one input, then bet on its conformal p-value (or collect it in warm-up)."""
        row = as_row(x, self._n_features)
        score, outside = self._score_row(row)
        self._start_update()
        self._support.append(outside)
        index = self._n_seen
        self._n_seen += 1
        self._p_value = math.nan
        if self._phase == MONITORING and self._limit_room() == 0:
            self._collect_edges([score])
        elif self._phase == MONITORING:
            assert self._pv is not None
            self._pv.update(score)
            self._p_value = self._pv.p_value
            if self._test.step(self._p_value):
                self._raise(self._test.alarm_event(index))
        elif self._phase == WARMING_UP:
            self._collect([score])

    def update_many(self, X: ArrayLike) -> None:
        """Update with every row of ``X`` in order; the same results as repeated :meth:`update`
        (see :meth:`update_batch`). ``last_alarms`` then lists every alarm the batch raised."""
        self.update_batch(as_matrix(X, "X"))

    def update_batch(
        self, X: FloatArray, on_alarm: AlarmCallback | None = None
    ) -> BatchTrace:
        """Update with every row of ``X`` (n, d) in order, bit for bit as repeated :meth:`update`.

        Scores in one batch (or from :meth:`prepare`), then conformal p-values, betting and the
        alarm rule in compiled spans that stop at an alarm; re-baselining and warm-up happen
        inside the batch. ``on_alarm(i, event)`` is called right after the update at batch
        position i that raised ``event``, the monitor then as after that update; afterwards
        ``last_alarms`` lists every alarm of the batch. Returns the properties after each update.
        """
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != self._n_features:
            raise ValueError(f"X must have shape (n, {self._n_features}), got {arr.shape}")
        n = arr.shape[0]
        if n and not np.isfinite(arr).all():
            raise ValueError("X contains NaN or infinite values")
        scores, flags = self._score_batch(arr)
        trace = BatchTrace.empty(n)
        alarms: list[AlarmEvent] = []
        self._start_update()
        self._batch_phases(
            n, trace, on_alarm,
            monitor_span=lambda i: self._monitor_span(scores, i, n, trace, alarms),
            warmup_left=lambda: self.rebaseline - len(self._warmup),
            collect=lambda start, stop: self._collect(scores[start:stop].tolist()),
            after_span=lambda start, stop: self._support.extend(flags[start:stop]),
        )
        self._last_alarms = tuple(alarms)
        trace.outside = np.array(flags, dtype=bool)
        return trace

    def _score_batch(self, arr: FloatArray) -> tuple[FloatArray, list[bool]]:
        """Nonconformity and support flag of each row: prepared ones looked up, the others
        computed in one batch (a row's score does not depend on its batch)."""
        n = arr.shape[0]
        if n == 0:
            return np.empty(0, np.float64), []
        prepared = self._prepared
        found: list[tuple[float, bool] | None] = [None] * n
        if prepared:
            # the rows' keys (row.tobytes()) as slices of one buffer: no view per row
            raw, width = np.ascontiguousarray(arr).tobytes(), arr.shape[1] * 8
            get = prepared.get
            found = [get(raw[k : k + width]) for k in range(0, n * width, width)]
        missing = [j for j, f in enumerate(found) if f is None]
        if missing:
            sub = arr if len(missing) == n else arr[missing]
            computed = self._nonconformity(sub)
            pairs = zip(computed.tolist(), self._outside(sub, computed).tolist(), strict=True)
            for j, pair in zip(missing, pairs, strict=True):
                found[j] = pair
        return np.array([f[0] for f in found], np.float64), [f[1] for f in found]  # type: ignore[index]

    def _monitor_span(
        self, scores: FloatArray, i: int, n: int, trace: BatchTrace, alarms: list[AlarmEvent]
    ) -> tuple[int, AlarmEvent | None]:
        """Monitor events i.. until an alarm or the end of a compiled span; (used, alarm)."""
        pv, test = self._pv, self._test
        assert pv is not None
        room = self._limit_room()
        if room == 0:  # scores that fix the bins: no p-value, the martingale waits
            used = min(LIMIT_EDGES - len(self._edges or ()), n - i)
            self._trace_idle(trace, i, i + used)
            self._p_value = math.nan
            self._n_seen += used
            self._collect_edges(scores[i : i + used].tolist())
            return used, None
        if room is not None:
            n = min(n, i + room)
        if not batch.supports_betting(test.betting):
            # the exact per-event steps (a betting function without a compiled step)
            pv.update(float(scores[i]))
            self._p_value = pv.p_value
            self._n_seen += 1
            event = None
            if test.step(self._p_value):
                event = test.alarm_event(self._n_seen - 1)
                self._batch_alarm(event, alarms)
            self._trace_now(trace, i)
            return 1, event
        used, alarm = batch.plain_span(pv, scores, i, n, test.betting, test.rule, trace)
        self._p_value = pv.p_value
        return self._end_span(used, alarm, alarms)

    def _limit_room(self) -> int | None:
        """How many exact p-values are left before the ``reference_limit`` (None: no limit
        ahead); 0 while the scores that fix the bins are collected."""
        pv = self._pv
        if self.reference_limit is None or pv is None or pv.quantized:
            return None
        if self._edges is None and pv.n_reference >= self.reference_limit:
            self._edges = []
        return 0 if self._edges is not None else self.reference_limit - pv.n_reference

    def _collect_edges(self, scores: list[float]) -> None:
        assert self._edges is not None and self._pv is not None
        self._edges.extend(scores)
        if len(self._edges) >= LIMIT_EDGES:
            self._pv.quantize(np.asarray(self._edges), LIMIT_BINS)
            self._edges = None

    def _collect(self, scores: list[float]) -> None:
        self._warmup.extend(scores)
        if len(self._warmup) >= self.rebaseline:
            self._pv = self._new_p_values(np.asarray(self._warmup))
            self._warmup = []
            self._resume()

    def _on_alarm(self) -> None:
        self._pv = None  # the old regime's reference is not needed any more

    # ---------------------------------------------------------------------------- state
    def clone(self) -> CovariateMonitor:
        """A new monitor with the same parameters and calibration, in its initial state."""
        if self.calibration_X is None:
            raise ValueError("a monitor restored with from_state has no calibration_X to clone")
        return CovariateMonitor(**self._params(), calibration_X=self.calibration_X)

    def _params(self) -> dict[str, Any]:
        return {
            "scorer": self.scorer,
            "betting": self.betting,
            "rule": self.rule,
            "threshold": self._threshold_arg,
            "alpha": self.alpha,
            "rebaseline": self.rebaseline,
            "max_reference": self.max_reference,
            "seed": self.seed,
            "fit_fraction": self.fit_fraction,
            "support_level": self.support_level,
            "support_history": self.support_history,
            # a tabular embedding's unseen-category columns (absent from a numeric stream's)
            **({"outside_columns": list(self.outside_columns)} if self.outside_columns else {}),
            # absent from a state of before the limit existed (as None)
            **({"reference_limit": self.reference_limit} if self.reference_limit else {}),
            **({"reference_bank": self.reference_bank} if self.reference_bank else {}),
        }

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (builtins and numpy arrays); :meth:`from_state` continues exactly.

        The calibration features are not included (the fitted scorer and the reference are).
        """
        params = self._params()
        if isinstance(self.scorer, Scorer):
            params["scorer"] = {"name": self.scorer.name, "params": self.scorer.get_params()}
        return new_state(
            self,
            params=params,
            scorer=self._scorer.state_dict(),
            n_features=self._n_features,
            support_threshold=self._support_threshold,
            center=self._center.copy(),
            limits=self._limits.copy(),
            support=np.asarray(self._support, dtype=np.uint8),
            warmup=np.asarray(self._warmup, dtype=np.float64),
            **({} if self._edges is None else {"edges": np.asarray(self._edges, np.float64)}),
            p_values=None if self._pv is None else self._pv.state_dict(),
            monitor=self._monitor_state(),
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild a monitor saved with :meth:`state_dict` (``calibration_X`` is None)."""
        check_state(state, cls)
        obj = cls.__new__(cls)
        params = dict(state["params"])
        spec = params.pop("scorer")
        obj.scorer = spec if isinstance(spec, str) else make_scorer(spec["name"], **spec["params"])
        obj._threshold_arg = params.pop("threshold")
        obj.outside_columns = tuple(params.pop("outside_columns", ()))
        obj.reference_limit = params.pop("reference_limit", None)
        obj.reference_bank = params.pop("reference_bank", None)
        for name, value in params.items():
            setattr(obj, name, value)
        obj.calibration_X = None
        obj._scorer = scorer_from_state(state["scorer"])
        obj._n_features = int(state["n_features"])
        obj._support_threshold = float(state["support_threshold"])
        obj._center = np.asarray(state["center"], np.float64)
        obj._limits = np.asarray(state["limits"], np.float64)
        flags = np.asarray(state["support"], dtype=bool).tolist()
        obj._support = collections.deque(flags, maxlen=obj.support_history)
        obj._prepared = {}
        obj._warmup = np.asarray(state["warmup"], dtype=np.float64).tolist()
        edges = state.get("edges")
        obj._edges = None if edges is None else np.asarray(edges, np.float64).tolist()
        pv = state["p_values"]
        obj._pv = None if pv is None else ConformalPValue.from_state(pv)
        obj._load_monitor_state(state["monitor"])
        return obj


def _upper_threshold(reference: FloatArray, level: float) -> float:
    """Value t with: 1 + #{j: r_j ≥ v} <= level·(m + 1) exactly when v > t.

    With k = ⌊level·(m + 1)⌋ − 1 reference values allowed at or above v, t is the (k + 1)-th
    largest reference value; +inf when even k = 0 is not allowed (level < 1/(m + 1)).
    """
    k = math.floor(level * (reference.size + 1)) - 1
    if k < 0:
        return math.inf
    return float(np.sort(reference)[::-1][min(k, reference.size - 1)])
