"""The pair of monitors of one stream: the covariate monitor, the weighted conditional monitor and
the diagnosis of their alarms (:mod:`monitor.core.diagnosis`), fed one event at a time
(``update_*``,
for notebooks and as the reference) or a poll batch at a time (:meth:`StreamDetectors.update_batch`,
the worker's path; identical results).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.detectors import AlarmEvent, ConditionalMonitor, CovariateMonitor
from monitor.core.detectors.base import BatchTrace, FloatArray, as_row, check_int, window_mean
from monitor.core.diagnosis import (
    INSUFFICIENT_EVIDENCE,
    MIN_EVIDENCE,
    MIN_RECENT,
    OUTSIDE_SUPPORT_LEVEL,
    PENALISED_LEVEL,
    RECENT,
    diagnose_conditional,
    diagnose_covariate,
)
from monitor.core.martingales.state import check_state, new_state
from monitor.core.martingales.alarms import EventRateThreshold, Ville
from monitor.streams.config import BUDGET_SHARE, DEFAULT_THRESHOLD

if TYPE_CHECKING:
    from monitor.streams.config import AlarmConfig, StreamConfig

__all__ = ["BatchResult", "DetectorAlarm", "StreamDetectors"]


@dataclass(frozen=True, slots=True)
class DetectorAlarm:
    """An alarm with its diagnosis, as raised by :class:`StreamDetectors` (the pipeline turns
    it into a :class:`monitor.streams.records.Alarm`).

    ``event_index`` and ``changepoint`` are stream event indices when the caller passes
    ``event_index`` to the updates, else indices among that detector's updates. ``revision``
    is 1 when the alarm is raised and one more at each revision (an alarm raised with kind
    ``insufficient_evidence`` is revised once its evidence is complete:
    :mod:`monitor.core.diagnosis`).
    """

    detector: str
    kind: str
    event_index: int
    changepoint: int | None
    statistic: float
    threshold: float
    rule: str
    evidence: dict[str, Any] = field(default_factory=dict)
    revision: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "kind": self.kind,
            "event_index": self.event_index,
            "changepoint": self.changepoint,
            "statistic": self.statistic,
            "threshold": self.threshold,
            "rule": self.rule,
            "evidence": dict(self.evidence),
            "revision": self.revision,
        }


@dataclass(frozen=True, slots=True)
class _Pending:
    """An alarm raised with too little evidence: its window [start, end] of the detector's
    updates is complete after update ``end`` (``start`` + ``min_events`` - 1)."""

    alarm: DetectorAlarm
    start: int
    end: int

    def to_json(self) -> dict[str, Any]:
        return {"alarm": self.alarm.to_json(), "start": self.start, "end": self.end}

    @classmethod
    def load(cls, state: dict[str, Any]) -> _Pending:
        return cls(DetectorAlarm(**state["alarm"]), int(state["start"]), int(state["end"]))


@dataclass(slots=True)
class BatchResult:
    """What :meth:`StreamDetectors.update_batch` produced: each monitor's trace (its properties
    after each of its updates) and the diagnosed alarms as ``(detector, position, alarm)``, the
    position counted among that detector's updates of the batch, in the order they were raised."""

    cov_trace: BatchTrace
    cond_trace: BatchTrace
    alarms: list[tuple[str, int, DetectorAlarm]] = field(default_factory=list)
    #: The threshold in force after each update, for a detector whose threshold moves (a time
    #: budget, Ville's lifetime spending; else None: the monitor's threshold).
    cov_thresholds: FloatArray | None = None
    cond_thresholds: FloatArray | None = None

    def last_alarms(self, n_cov: int, cov_before: NDArray[np.int64]) -> tuple[DetectorAlarm, ...]:
        """The alarms of the batch's last update (what ``new_alarms`` holds after it)."""
        n_cond = self.cond_trace.p_value.size
        if n_cond and int(cov_before[-1]) == n_cov:
            last = ("conditional", n_cond - 1)
        elif n_cov:
            last = ("covariate", n_cov - 1)
        else:
            return ()
        return tuple(a for d, i, a in self.alarms if (d, i) == last)


@dataclass(frozen=True, slots=True)
class _ConditionalView:
    """What an alarm's evidence reads of the conditional monitor, as it was at the alarm."""

    penalised_fraction: float
    weights_ess: float
    adapting: bool
    density_ratio_coefficients: FloatArray | None = None


class _EventIndex:
    """Stream event index of each of a detector's last ``size`` updates (bounded memory)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.indices: collections.deque[int] = collections.deque(maxlen=size)
        self.n = 0

    def extend(self, event_indexes: Iterable[int]) -> None:
        """:meth:`add` of each of ``event_indexes`` (all given)."""
        items = list(event_indexes)
        self.indices.extend(items)
        self.n += len(items)

    def add(self, event_index: int | None) -> int:
        index = self.n if event_index is None else int(event_index)
        self.indices.append(index)
        self.n += 1
        return index

    def lookup(self, update: int | None) -> int | None:
        """Event index of absolute update ``update`` (the oldest kept one if it is older)."""
        if update is None or not self.indices:
            return None
        first = self.n - len(self.indices)
        return self.indices[min(max(update - first, 0), len(self.indices) - 1)]

    def state(self) -> dict[str, Any]:
        return {"size": self.size, "indices": np.asarray(self.indices, np.int64), "n": self.n}

    @classmethod
    def load(cls, state: dict[str, Any]) -> _EventIndex:
        obj = cls(int(state["size"]))
        obj.indices.extend(int(i) for i in np.asarray(state["indices"]).tolist())
        obj.n = int(state["n"])
        return obj


class StreamDetectors:
    """Covariate monitor + weighted conditional monitor + diagnosis for one stream.

    ``update_covariate(x)`` for every prediction event and ``update_conditional(x, score)`` when
    its label is known (in label-arrival order); ``update(x, score)`` does both (``score=None``:
    label not known yet, only the covariate monitor steps). After each call ``new_alarms``
    holds the alarms it raised, diagnosed. A covariate alarm starts the adaptation of the
    weighted conditional monitor.

    Parameters
    ----------
    covariate, conditional
        The two monitors (owned by this object from now on).
    history
        How many recent updates keep their stream event index and support flag, for mapping
        changepoints and for the diagnosis (bounded memory).
    outside_level, penalised_level
        Diagnosis levels (:data:`OUTSIDE_SUPPORT_LEVEL`, :data:`PENALISED_LEVEL`).
    budgets
        A time budget's threshold per detector (``"covariate"``, ``"conditional"``): before
        each update it sets that monitor's threshold, which then follows the detector's update
        rate on event time (updates without ``ts`` count at the budget's maximum rate).
    min_events
        Fewest events from an alarm's changepoint to the alarm from which its kind is decided
        (:data:`MIN_EVIDENCE`); an alarm with fewer is raised as ``insufficient_evidence`` and
        revised (a new :class:`DetectorAlarm` with the same ``event_index`` and ``revision`` 2
        in ``new_alarms``) after the update that completes its evidence.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X_cal = rng.normal(size=(600, 2))
    >>> cal_scores = np.abs(rng.normal(size=600))
    >>> detectors = StreamDetectors(
    ...     CovariateMonitor("knn", X_cal, threshold=1000.0),
    ...     ConditionalMonitor(cal_scores, X_cal))
    >>> X = np.vstack([rng.normal(size=(300, 2)), rng.normal(size=(200, 2)) + [6.0, 0.0]])
    >>> scores = np.abs(rng.normal(size=500)) * np.r_[np.ones(300), 5 * np.ones(200)]
    >>> for t in range(500):  # inputs leave the support at t = 300 and the model fails there
    ...     detectors.update(X[t], scores[t])
    ...     for a in detectors.new_alarms:
    ...         print(t, a.detector, a.kind, a.changepoint)
    302 conditional insufficient_evidence 300
    309 conditional extreme_covariate_shift 300
    310 covariate insufficient_evidence 303
    312 covariate extreme_covariate_shift 303
    """

    def __init__(
        self,
        covariate: CovariateMonitor,
        conditional: ConditionalMonitor,
        history: int = 10_000,
        outside_level: float = OUTSIDE_SUPPORT_LEVEL,
        penalised_level: float = PENALISED_LEVEL,
        budgets: dict[str, EventRateThreshold] | None = None,
        min_events: int = MIN_EVIDENCE,
    ) -> None:
        if not isinstance(covariate, CovariateMonitor):
            raise ValueError(f"covariate must be a CovariateMonitor, got {covariate!r}")
        if not isinstance(conditional, ConditionalMonitor):
            raise ValueError(f"conditional must be a ConditionalMonitor, got {conditional!r}")
        if not (isinstance(history, int) and history >= 1):
            raise ValueError(f"history must be an integer >= 1, got {history!r}")
        for name, level in (("outside_level", outside_level), ("penalised_level", penalised_level)):
            if not 0.0 < float(level) <= 1.0:
                raise ValueError(f"{name} must lie in (0, 1], got {level!r}")
        budgets = dict(budgets or {})
        for name, budget in budgets.items():
            if name not in ("covariate", "conditional"):
                raise ValueError(f"budgets are keyed 'covariate' or 'conditional', got {name!r}")
            if not isinstance(budget, EventRateThreshold):
                raise ValueError(f"budgets[{name!r}] must be an EventRateThreshold")
            if (covariate if name == "covariate" else conditional).rule == "ville":
                raise ValueError(f"the {name} monitor's ville rule takes no budget")
        self.budgets = budgets
        check_int("min_events", min_events, 1)
        if min_events > history // 2:
            raise ValueError(
                f"min_events must be at most history // 2 = {history // 2}, got {min_events}"
            )
        self.covariate = covariate
        self.conditional = conditional
        self.history = history
        self.outside_level = outside_level
        self.penalised_level = penalised_level
        self.min_events = min_events
        self._pending: list[_Pending] = []
        self._cov_events = _EventIndex(history)
        self._cond_events = _EventIndex(history)
        self._cond_outside: collections.deque[bool] = collections.deque(maxlen=history)
        self._cond_penalised: collections.deque[bool] = collections.deque(maxlen=history)
        self._new: tuple[DetectorAlarm, ...] = ()

    @classmethod
    def from_config(
        cls, config: StreamConfig, calibration_X: ArrayLike, calibration_scores: ArrayLike
    ) -> StreamDetectors:
        """Both monitors as a :class:`monitor.streams.config.StreamConfig` describes them.

        ``calibration_X`` are the calibration events' features (the covariate scorer's input
        and the density ratio's source), ``calibration_scores`` their conditional scores.
        ``betting``, when the configuration sets it, applies to both monitors; otherwise each
        keeps its own default (Composite Jumper for the covariate monitor, the one-sided plug-in
        power for the conditional monitor: ``docs/detectors.md``). ``max_reference`` needs
        ``weighted: false``; a weighted stream bounds its reference with ``reference_window``.
        """
        betting: dict[str, Any] = {}
        if config.betting is not None:
            betting["betting"] = config.betting
        if config.weighted and config.max_reference is not None:
            raise ValueError(
                "max_reference (quantized bounded memory) needs weighted: false; a weighted "
                "stream bounds its reference with reference_window"
            )
        cov_alarm = config.covariate_alarm or config.alarm
        budgets = {
            name: _time_budget(alarm)
            for name, alarm in (("covariate", cov_alarm), ("conditional", config.alarm))
            if alarm.budget_seconds is not None
        }
        covariate = CovariateMonitor(
            config.covariate_score,
            calibration_X,
            rule=cov_alarm.rule,
            threshold=_first_threshold(cov_alarm),
            alpha=cov_alarm.alpha,
            rebaseline=config.rebaseline,
            max_reference=config.max_reference,
            seed=config.seed,
            **betting,
        )
        conditional = ConditionalMonitor(
            calibration_scores,
            calibration_X,
            weighted=config.weighted,
            rule=config.alarm.rule,
            threshold=_first_threshold(config.alarm),
            alpha=config.alarm.alpha,
            batch_size=config.weight_batch,
            rebaseline=config.rebaseline,
            max_reference=config.max_reference,
            reference_window=config.reference_window,
            seed=config.seed,
            **betting,
        )
        for monitor, alarm in ((covariate, cov_alarm), (conditional, config.alarm)):
            if alarm.rule == "ville" and alarm.spending != "per_segment":
                monitor._test.rule = Ville(alpha=alarm.alpha, spending=alarm.spending)
        return cls(
            covariate, conditional, budgets=budgets, min_events=config.diagnosis.min_events
        )

    @property
    def new_alarms(self) -> tuple[DetectorAlarm, ...]:
        """The alarms raised by the last update call, diagnosed."""
        return self._new

    # ---------------------------------------------------------------------------- updates
    def update(
        self,
        x: ArrayLike,
        score: float | None = None,
        event_index: int | None = None,
        ts: float | None = None,
    ) -> None:
        """A prediction event, with its conditional score if the label is already known;
        ``ts`` is its event time in seconds (needed by a time budget)."""
        self.update_covariate(x, event_index, ts)
        raised = self._new
        if score is not None:
            self.update_conditional(x, score, event_index, ts)
            self._new = raised + self._new

    def update_covariate(
        self, x: ArrayLike, event_index: int | None = None, ts: float | None = None
    ) -> None:
        """Step the covariate monitor with the inputs of one prediction event (event time
        ``ts`` in seconds)."""
        if "covariate" in self.budgets:
            as_row(x, self.covariate.n_features)  # a bad row changes nothing, the budget included
            self._budget_step("covariate", ts)
        self._new = ()
        self._cov_events.add(event_index)
        self.covariate.update(x)
        for event in self.covariate.last_alarms:
            self._new = (*self._new, self._covariate_alarm(event))
            self.conditional.start_adaptation()
        self._new += tuple(a for _, a in self._revisions("covariate", self.covariate.n_seen))

    def update_conditional(
        self,
        x: ArrayLike,
        score: float,
        event_index: int | None = None,
        ts: float | None = None,
    ) -> None:
        """Step the conditional monitor with a labelled event's features and score (``ts``:
        the event time of the label's arrival, in seconds)."""
        row = as_row(x, self.covariate.n_features)  # checked once, for both monitors
        self._budget_step("conditional", ts)
        self._new = ()
        self._cond_events.add(event_index)
        self._cond_outside.append(self.covariate._is_outside_row(row))
        self.conditional._update_row(row, score)
        self._cond_penalised.append(self.conditional.penalised)
        for event in self.conditional.last_alarms:
            self._new = (*self._new, self._conditional_alarm(event))
        self._new += tuple(a for _, a in self._revisions("conditional", self._cond_events.n))

    # ------------------------------------------------- pending alarms after a replacement
    @property
    def pending(self) -> tuple[DetectorAlarm, ...]:
        """The alarms raised as ``insufficient_evidence`` whose evidence is not complete yet."""
        return tuple(p.alarm for p in self._pending)

    def track_pending(
        self,
        X_cov: FloatArray,
        cov_index: Sequence[int],
        X_cond: FloatArray,
        cond_index: Sequence[int],
    ) -> list[tuple[str, int, DetectorAlarm]]:
        """For detectors replaced by a new configuration version: complete the evidence of
        their pending alarms, nothing else. The predictions' inputs ``X_cov`` (stream event
        indexes ``cov_index``) and the labelled events' inputs ``X_cond`` (``cond_index``, in
        the order their labels joined) count as updates for the support flags only (no test,
        no alarm; :meth:`CovariateMonitor.track_support`), each detector's only up to the last
        update its pending alarms need; the revisions they complete, as ``(detector, position
        among that detector's updates of the call, alarm)``. The same revisions whether the
        updates come one by one or in batches (a support flag depends on its row alone); an
        update with no pending alarm left is not counted: the object is then done with."""
        out: list[tuple[str, int, DetectorAlarm]] = []
        for detector, X, index in (("covariate", X_cov, cov_index),
                                   ("conditional", X_cond, cond_index)):
            ends = [p.end for p in self._pending if p.alarm.detector == detector]
            covariate = detector == "covariate"
            n0 = self.covariate.n_seen if covariate else self._cond_events.n
            k = min(max(ends, default=n0 - 1) + 1 - n0, X.shape[0])
            if k <= 0:
                continue
            if covariate:
                self.covariate.track_support(X[:k])
                self._cov_events.extend(index[:k])
            else:
                self._cond_outside.extend(self.covariate.is_outside(X[:k]).tolist())
                self._cond_penalised.extend([False] * k)  # a revision does not read them
                self._cond_events.extend(index[:k])
            out += [(detector, end - n0, a) for end, a in self._revisions(detector, n0 + k)]
        return out

    # ------------------------------------------------------------------------ batch updates
    def update_batch(
        self,
        X_cov: FloatArray,
        cov_index: Sequence[int],
        X_cond: FloatArray,
        cond_scores: FloatArray,
        cond_index: Sequence[int],
        cov_before: NDArray[np.int64],
        cov_ts: ArrayLike | None = None,
        cond_ts: ArrayLike | None = None,
    ) -> BatchResult:
        """Both monitors over one poll batch of a stream: the same results as the per-event calls
        (:meth:`update_covariate` for each prediction, :meth:`update_conditional` for each
        labelled event, interleaved as they arrived), with each monitor advanced in one batch
        call per segment.

        ``X_cov`` are the checked (n, d) inputs of the batch's prediction events and ``cov_index``
        their stream event indexes; ``X_cond``, ``cond_scores``, ``cond_index`` the labelled
        events in the order their labels joined, and ``cov_before[j]`` how many of the batch's
        predictions came before labelled event j. The covariate monitor does not depend on the
        conditional one, so it runs over the whole batch first; the conditional monitor then runs
        in segments that end at each covariate alarm, where the per-event path would tell it to
        adapt. An alarm's evidence reads the other monitor as it was at that point of the
        arrival order (the conditional monitor at the segment's end, the covariate statistic
        from its trace). ``cov_ts`` / ``cond_ts`` are the updates' event times in seconds,
        read by a detector with a time budget (None: the updates count at its maximum rate;
        :class:`EventRateThreshold`): its monitor then runs in spans of one
        threshold each (``BatchResult.cov_thresholds`` / ``cond_thresholds``).

        A batch longer than :meth:`_batch_limit` updates runs as two halves in arrival order
        (the same results): a revision is decided at the batch's end from the recent support
        flags, which must still be kept then.
        """
        n, m = X_cov.shape[0], X_cond.shape[0]
        if n + m > self._batch_limit():
            return self._split_batch(X_cov, cov_index, X_cond, cond_scores, cond_index, cov_before,
                                     cov_ts, cond_ts)
        cov_thr = self._budget_thresholds("covariate", cov_ts, len(cov_index))
        cond_thr = self._budget_thresholds("conditional", cond_ts, len(cond_index))
        cov_seg = _segment_thresholds(self.covariate, len(cov_index))
        cond_seg = _segment_thresholds(self.conditional, len(cond_index))
        cov_stat0 = self.covariate.statistic
        cov_n0, cond_n0 = self.covariate.n_seen, self._cond_events.n
        cov_alarms: list[tuple[int, AlarmEvent, float]] = []

        def on_covariate(i: int, event: AlarmEvent) -> None:
            outside = _evidence_share(self.covariate.outside_fraction, event)
            cov_alarms.append((i, event, outside))
            if cov_seg is not None:
                cov_seg[i:] = self.covariate.threshold  # the next segment's, from the alarm on

        cov_trace = _run_budgeted(self.covariate, X_cov, None, on_covariate, cov_thr)
        result = BatchResult(cov_trace, BatchTrace.empty(0, conditional=True),
                             cov_thresholds=cov_thr if cov_seg is None else cov_seg,
                             cond_thresholds=cond_thr if cond_seg is None else cond_seg)
        outside = (
            self.covariate.is_outside(X_cond) if X_cond.shape[0] else np.zeros(0, bool)
        ).tolist()
        cov_stats = cov_trace.log_statistic
        added = j0 = 0
        segments: list[BatchTrace] = []
        for i, event, outside_share in cov_alarms:
            j1 = int(np.searchsorted(cov_before, i, side="right"))
            segments.append(self._conditional_segment(
                X_cond, cond_scores, cond_index, outside, j0, j1, cov_before, cov_stats,
                cov_stat0, result,
            ))
            self._cov_events.extend(cov_index[added : i + 1])
            added, j0 = i + 1, j1
            kind = diagnose_covariate(outside_share, self.outside_level)
            evidence = self._evidence(event, _exp(event.log_statistic), self.conditional)
            evidence["outside_support_fraction"] = outside_share
            alarm = self._record("covariate", kind, event, self._cov_events, evidence,
                                 None if cov_thr is None else float(cov_thr[i]))
            result.alarms.append(("covariate", i, alarm))
            self.conditional.start_adaptation()
        segments.append(self._conditional_segment(
            X_cond, cond_scores, cond_index, outside, j0, X_cond.shape[0], cov_before, cov_stats,
            cov_stat0, result,
        ))
        self._cov_events.extend(cov_index[added:])
        result.cond_trace = _concat_traces(segments)
        for detector, n0, n in (("covariate", cov_n0, self.covariate.n_seen),
                                ("conditional", cond_n0, self._cond_events.n)):
            result.alarms += [(detector, end - n0, a) for end, a in self._revisions(detector, n)]
        self._new = result.last_alarms(len(cov_index), cov_before)
        return result

    def _batch_limit(self) -> int:
        """Most updates of one :meth:`update_batch` call: after the last update of an alarm's
        evidence window (at most max(``min_events``, RECENT) updates long) the rest of the batch
        must not push the window's flags out of the kept history."""
        kept = min(self.history, self.covariate.support_history)
        return max(1, kept - max(self.min_events, RECENT))

    def _split_batch(
        self,
        X_cov: FloatArray,
        cov_index: Sequence[int],
        X_cond: FloatArray,
        cond_scores: FloatArray,
        cond_index: Sequence[int],
        cov_before: NDArray[np.int64],
        cov_ts: ArrayLike | None = None,
        cond_ts: ArrayLike | None = None,
    ) -> BatchResult:
        """:meth:`update_batch` as two calls on the first and second half in arrival order
        (labelled event j arrives after ``cov_before[j]`` predictions, before the next one)."""
        m = X_cond.shape[0]
        half = (X_cov.shape[0] + m) // 2
        q = int(np.searchsorted(cov_before + np.arange(m), half))  # labels arrived in the half
        p = half - q
        cts = None if cov_ts is None else np.asarray(cov_ts, np.float64)
        dts = None if cond_ts is None else np.asarray(cond_ts, np.float64)
        first = self.update_batch(
            X_cov[:p], cov_index[:p], X_cond[:q], cond_scores[:q], cond_index[:q], cov_before[:q],
            None if cts is None else cts[:p], None if dts is None else dts[:q],
        )
        second = self.update_batch(
            X_cov[p:], cov_index[p:], X_cond[q:], cond_scores[q:], cond_index[q:],
            cov_before[q:] - p, None if cts is None else cts[p:], None if dts is None else dts[q:],
        )
        shift = {"covariate": p, "conditional": q}
        return BatchResult(
            _concat_traces([first.cov_trace, second.cov_trace]),
            _concat_traces([first.cond_trace, second.cond_trace]),
            first.alarms + [(d, i + shift[d], a) for d, i, a in second.alarms],
            cov_thresholds=_concat_thresholds(first.cov_thresholds, second.cov_thresholds, p,
                                              X_cov.shape[0] - p),
            cond_thresholds=_concat_thresholds(first.cond_thresholds, second.cond_thresholds, q,
                                               m - q),
        )

    def _conditional_segment(
        self,
        X: FloatArray,
        scores: FloatArray,
        index: Sequence[int],
        outside: list[bool],
        j0: int,
        j1: int,
        cov_before: NDArray[np.int64],
        cov_stats: FloatArray,
        cov_stat0: float,
        result: BatchResult,
    ) -> BatchTrace:
        """Labelled events j0..j1-1 of a batch; their alarms are appended to ``result``."""
        raised: list[tuple[int, AlarmEvent, _ConditionalView]] = []
        cond = self.conditional

        budgeted = "conditional" in self.budgets
        moving = result.cond_thresholds

        def on_conditional(i: int, event: AlarmEvent) -> None:
            raised.append((j0 + i, event, _ConditionalView(
                cond.penalised_fraction, cond.weights_ess, cond.adapting,
                cond.density_ratio_coefficients,
            )))
            if moving is not None and not budgeted:
                moving[j0 + i :] = cond.threshold  # Ville's next segment, from the alarm on

        rows = X[j0:j1] if cond.weighted else None
        thresholds = moving[j0:j1] if budgeted and moving is not None else None
        trace = _run_budgeted(cond, rows, scores[j0:j1], on_conditional, thresholds)
        penalised = trace.penalised.tolist() if trace.penalised is not None else [False] * (j1 - j0)
        added = j0
        for j, event, view in raised:
            self._extend_conditional(index, outside, penalised, j0, added, j + 1)
            added = j + 1
            c = int(cov_before[j])
            cov_stat = cov_stat0 if c == 0 else _exp(float(cov_stats[c - 1]))
            alarm = self._conditional_alarm(
                event, cov_stat, view,
                float(moving[j]) if budgeted and moving is not None else None,
            )
            result.alarms.append(("conditional", j, alarm))
        self._extend_conditional(index, outside, penalised, j0, added, j1)
        return trace

    def _extend_conditional(
        self, index: Sequence[int], outside: list[bool], penalised: list[bool], j0: int,
        start: int, stop: int,
    ) -> None:
        self._cond_events.extend(index[start:stop])
        self._cond_outside.extend(outside[start:stop])
        self._cond_penalised.extend(penalised[start - j0 : stop - j0])

    # ----------------------------------------------------------------------------- budget
    def _budget_step(self, detector: str, ts: float | None) -> None:
        """Set the detector's threshold for its next update from its time budget, if any."""
        budget = self.budgets.get(detector)
        if budget is None:
            return
        # An update without an event time takes the latest one: it counts at the maximum rate.
        threshold = float(budget.thresholds([budget.latest if ts is None else ts])[0])
        monitor = self.covariate if detector == "covariate" else self.conditional
        monitor._test.rule.set_threshold(threshold)  # type: ignore[attr-defined]

    def _budget_thresholds(
        self, detector: str, ts: ArrayLike | None, n: int
    ) -> FloatArray | None:
        budget = self.budgets.get(detector)
        if budget is None:
            return None
        if ts is None:  # no event times: the latest one, counted at the maximum rate
            return budget.thresholds(np.full(n, budget.latest))
        arr = np.asarray(ts, dtype=np.float64).reshape(-1)
        if arr.size != n:
            raise ValueError(f"{detector} event times: {arr.size} for {n} updates")
        return budget.thresholds(arr)

    # -------------------------------------------------------------------------- diagnosis
    def _covariate_alarm(self, event: AlarmEvent) -> DetectorAlarm:
        outside = _evidence_share(self.covariate.outside_fraction, event)
        kind = diagnose_covariate(outside, self.outside_level)
        evidence = self._evidence(event, _exp(event.log_statistic), self.conditional)
        evidence["outside_support_fraction"] = outside
        return self._record("covariate", kind, event, self._cov_events, evidence)

    def _conditional_alarm(
        self,
        event: AlarmEvent,
        covariate_statistic: float | None = None,
        view: _ConditionalView | ConditionalMonitor | None = None,
        threshold: float | None = None,
    ) -> DetectorAlarm:
        n = self._cond_events.n

        def outside_in(start: int, stop: int) -> float:
            return window_mean(self._cond_outside, n, start, stop)

        def penalised_in(start: int, stop: int) -> float:
            return window_mean(self._cond_penalised, n, start, stop)

        cond = self.conditional if view is None else view
        if covariate_statistic is None:
            covariate_statistic = self.covariate.statistic
        outside = _evidence_share(outside_in, event)
        penalised = _evidence_share(penalised_in, event)
        kind = diagnose_conditional(penalised, outside, self.penalised_level, self.outside_level)
        evidence = self._evidence(event, covariate_statistic, cond)
        evidence["outside_support_fraction"] = outside
        evidence["penalised_fraction"] = penalised
        evidence["penalised_fraction_since_adaptation"] = cond.penalised_fraction
        return self._record("conditional", kind, event, self._cond_events, evidence, threshold)

    def _evidence(
        self,
        event: AlarmEvent,
        covariate_statistic: float,
        cond: _ConditionalView | ConditionalMonitor,
    ) -> dict[str, Any]:
        evidence = {
            "covariate_statistic": covariate_statistic,
            "penalised_fraction": cond.penalised_fraction,
            "weights_ess": cond.weights_ess,
            "adapting": cond.adapting,
            "log_statistic": event.log_statistic,
            "log_martingale": event.log_martingale,
        }
        coefficients = cond.density_ratio_coefficients
        if coefficients is not None:  # the weighted monitor adapts: its density ratio's view
            evidence["density_ratio_coefficients"] = coefficients.tolist()
        return evidence

    def _record(
        self,
        detector: str,
        kind: str,
        event: AlarmEvent,
        index: _EventIndex,
        evidence: dict[str, Any],
        threshold: float | None = None,
    ) -> DetectorAlarm:
        """``threshold``: a time budget's threshold at the alarm (the batch path's), exactly;
        else the monitor's (its rule's threshold under a budget, which is then still the one
        of the alarm's update) or exp(log threshold)."""
        monitor = self.covariate if detector == "covariate" else self.conditional
        if threshold is None:
            budgeted = detector in self.budgets
            threshold = monitor.threshold if budgeted else _exp(event.log_threshold)
        start = event.index if event.changepoint is None else event.changepoint
        evidence["evidence_events"] = event.index - start + 1
        insufficient = event.index - start + 1 < self.min_events
        alarm = DetectorAlarm(
            detector=detector,
            kind=INSUFFICIENT_EVIDENCE if insufficient else kind,
            event_index=int(index.lookup(event.index) or 0),
            changepoint=index.lookup(event.changepoint),
            statistic=_exp(event.log_statistic),
            threshold=threshold,
            rule=monitor.rule,
            evidence=evidence,
        )
        if insufficient:
            self._pending.append(_Pending(alarm, start, start + self.min_events - 1))
        return alarm

    def _revisions(self, detector: str, n: int) -> list[tuple[int, DetectorAlarm]]:
        """The pending alarms of ``detector`` whose evidence its first ``n`` updates complete,
        revised, with the update that completed each (in the order they were raised)."""
        done = [p for p in self._pending if p.alarm.detector == detector and p.end < n]
        if not done:
            return []
        self._pending = [p for p in self._pending if p not in done]
        return [(p.end, self._revise(p)) for p in done]

    def _revise(self, pending: _Pending) -> DetectorAlarm:
        """The kind decided over the completed window (:mod:`monitor.core.diagnosis`, "Evidence
        needed"): the shares of :func:`_evidence_share` as if the alarm had been raised at the
        window's last update with the same changepoint."""
        window = AlarmEvent(pending.end, pending.start, 0.0, 0.0, 0.0)
        alarm = pending.alarm
        if alarm.detector == "covariate":
            outside = _evidence_share(self.covariate.outside_fraction, window)
            kind = diagnose_covariate(outside, self.outside_level)
            index = self._cov_events
        else:
            n = self._cond_events.n
            outside = _evidence_share(
                lambda a, b: window_mean(self._cond_outside, n, a, b), window
            )
            # No penalised flags after the alarm (no weighted p-value while re-baselining).
            kind = diagnose_conditional(math.nan, outside, self.penalised_level,
                                        self.outside_level)
            index = self._cond_events
        evidence = {
            **alarm.evidence,
            "outside_support_fraction": outside,
            "evidence_events": self.min_events,
            "evidence_until": index.lookup(pending.end),
        }
        return dataclasses.replace(alarm, kind=kind, evidence=evidence,
                                   revision=alarm.revision + 1)

    # ---------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state of both monitors and the diagnosis history (and the time budgets'
        rate estimators, when there are any: a state without them is the one of before)."""
        budgets = {name: budget.state_dict() for name, budget in self.budgets.items()}
        return new_state(
            self,
            params={
                "history": self.history,
                "outside_level": self.outside_level,
                "penalised_level": self.penalised_level,
                "min_events": self.min_events,
            },
            covariate=self.covariate.state_dict(),
            conditional=self.conditional.state_dict(),
            **({"budgets": budgets} if budgets else {}),
            cov_events=self._cov_events.state(),
            cond_events=self._cond_events.state(),
            cond_outside=np.asarray(self._cond_outside, np.uint8),
            cond_penalised=np.asarray(self._cond_penalised, np.uint8),
            new_alarms=[a.to_json() for a in self._new],
            pending=[p.to_json() for p in self._pending],
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild from :meth:`state_dict` output; continues exactly."""
        check_state(state, cls)
        obj = cls(
            CovariateMonitor.from_state(state["covariate"]),
            ConditionalMonitor.from_state(state["conditional"]),
            **state["params"],
            budgets={
                name: EventRateThreshold.from_state(budget)
                for name, budget in state.get("budgets", {}).items()
            },
        )
        obj._cov_events = _EventIndex.load(state["cov_events"])
        obj._cond_events = _EventIndex.load(state["cond_events"])
        obj._cond_outside.extend(np.asarray(state["cond_outside"], bool).tolist())
        obj._cond_penalised.extend(np.asarray(state["cond_penalised"], bool).tolist())
        obj._new = tuple(DetectorAlarm(**a) for a in state["new_alarms"])
        obj._pending = [_Pending.load(p) for p in state.get("pending", [])]
        return obj


def _evidence_share(share: Callable[[int, int], float], event: AlarmEvent) -> float:
    """The largest share of flagged events since the alarm's changepoint or in a trailing
    window of MIN_RECENT..RECENT events up to the alarm (nan only when no flag is kept)."""
    start = event.index if event.changepoint is None else event.changepoint
    starts = [start, *(event.index - k + 1 for k in range(MIN_RECENT, RECENT + 1))]
    kept = [v for v in (share(a, event.index) for a in starts) if not math.isnan(v)]
    return max(kept) if kept else math.nan


def _exp(log_value: float) -> float:
    return math.exp(min(log_value, math.log(1e300)))


def _run_batch(
    monitor: CovariateMonitor | ConditionalMonitor,
    X: FloatArray | None,
    scores: FloatArray | None,
    on_alarm: Callable[[int, AlarmEvent], None],
) -> BatchTrace:
    """One monitor over a batch (its ``update_batch``), leaving ``last_alarms`` as the per-event
    loop does: the alarms of its last update (unchanged by an empty batch)."""
    n = (X if scores is None else scores).shape[0]  # type: ignore[union-attr]
    before = monitor._last_alarms
    last: list[AlarmEvent] = []

    def callback(i: int, event: AlarmEvent) -> None:
        if i == n - 1:
            last.append(event)
        on_alarm(i, event)

    if isinstance(monitor, CovariateMonitor):
        assert X is not None
        trace = monitor.update_batch(X, callback)
    else:
        assert scores is not None
        trace = monitor.update_batch(X, scores, callback)
    monitor._last_alarms = tuple(last) if n else before
    return trace


def _run_budgeted(
    monitor: CovariateMonitor | ConditionalMonitor,
    X: FloatArray | None,
    scores: FloatArray | None,
    on_alarm: Callable[[int, AlarmEvent], None],
    thresholds: FloatArray | None,
) -> BatchTrace:
    """:func:`_run_batch` in spans of one threshold each (set on the monitor's rule before
    the span); the same as updates one by one with the threshold set before each."""
    if thresholds is None or thresholds.size == 0:
        return _run_batch(monitor, X, scores, on_alarm)
    n = thresholds.size
    cuts = [0, *(np.flatnonzero(thresholds[1:] != thresholds[:-1]) + 1).tolist(), n]
    traces = []
    for a, b in itertools.pairwise(cuts):
        monitor._test.rule.set_threshold(float(thresholds[a]))  # type: ignore[attr-defined]

        def shifted(i: int, event: AlarmEvent, a: int = a) -> None:
            on_alarm(a + i, event)

        traces.append(_run_batch(
            monitor, None if X is None else X[a:b], None if scores is None else scores[a:b],
            shifted,
        ))
    return _concat_traces(traces)


def _segment_thresholds(
    monitor: CovariateMonitor | ConditionalMonitor, n: int
) -> FloatArray | None:
    """For a Ville rule with lifetime spending (whose threshold changes at each restart): the
    threshold now for each of the next n updates, to be updated at each alarm; else None."""
    rule = monitor._test.rule
    if not (isinstance(rule, Ville) and rule.spending == "lifetime"):
        return None
    return np.full(n, rule.threshold)


def _time_budget(alarm: AlarmConfig) -> EventRateThreshold:
    assert alarm.budget_seconds is not None
    assert alarm.min_threshold is not None  # filled in with the budget
    return EventRateThreshold(alarm.budget_seconds, share=BUDGET_SHARE, floor=alarm.min_threshold)


def _first_threshold(alarm: AlarmConfig) -> float:
    """The threshold a monitor starts with: the configured one, or a time budget's warm-up
    threshold (Ville's comes from alpha)."""
    if alarm.budget_seconds is not None:
        return _time_budget(alarm).threshold
    return alarm.fixed_threshold or DEFAULT_THRESHOLD


def _concat_traces(traces: list[BatchTrace]) -> BatchTrace:
    if len(traces) == 1:
        return traces[0]

    def cat(name: str) -> np.ndarray | None:
        parts = [getattr(t, name) for t in traces]
        return None if any(p is None for p in parts) else np.concatenate(parts)

    return BatchTrace(*(cat(name) for name in (  # type: ignore[arg-type]
        "p_value", "log_martingale", "log_statistic", "weights_ess", "penalised"
    )))


def _concat_thresholds(
    first: FloatArray | None, second: FloatArray | None, n1: int, n2: int
) -> FloatArray | None:
    """The thresholds in force over two halves of a split batch (None: fixed in both)."""
    if first is None and second is None:
        return None
    return np.concatenate([
        np.full(n1, np.nan) if first is None else first,
        np.full(n2, np.nan) if second is None else second,
    ])
