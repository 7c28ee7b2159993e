"""The pair of monitors of one stream: the covariate monitor, the weighted conditional monitor and
the diagnosis of their alarms (:mod:`monitor.diagnosis`), fed one event at a time (``update_*``,
for notebooks and as the reference) or a poll batch at a time (:meth:`StreamDetectors.update_batch`,
the worker's path; identical results).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.detectors import AlarmEvent, ConditionalMonitor, CovariateMonitor
from monitor.detectors._base import BatchTrace, FloatArray, as_row, window_mean
from monitor.diagnosis import (
    MIN_RECENT,
    OUTSIDE_SUPPORT_LEVEL,
    PENALISED_LEVEL,
    RECENT,
    diagnose_conditional,
    diagnose_covariate,
)
from monitor.martingales._state import check_state, new_state

if TYPE_CHECKING:
    from monitor.config import StreamConfig

__all__ = ["BatchResult", "DetectorAlarm", "StreamDetectors"]


@dataclass(frozen=True, slots=True)
class DetectorAlarm:
    """An alarm with its diagnosis, as raised by :class:`StreamDetectors` (the pipeline turns
    it into a :class:`monitor.records.Alarm`).

    ``event_index`` and ``changepoint`` are stream event indices when the caller passes
    ``event_index`` to the updates, else indices among that detector's updates.
    """

    detector: str
    kind: str
    event_index: int
    changepoint: int | None
    statistic: float
    threshold: float
    rule: str
    evidence: dict[str, Any] = field(default_factory=dict)

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
        }


@dataclass(slots=True)
class BatchResult:
    """What :meth:`StreamDetectors.update_batch` produced: each monitor's trace (its properties
    after each of its updates) and the diagnosed alarms as ``(detector, position, alarm)``, the
    position counted among that detector's updates of the batch, in the order they were raised."""

    cov_trace: BatchTrace
    cond_trace: BatchTrace
    alarms: list[tuple[str, int, DetectorAlarm]] = field(default_factory=list)

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

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X_cal = rng.normal(size=(600, 2))
    >>> cal_scores = np.abs(rng.normal(size=600))
    >>> detectors = StreamDetectors(
    ...     CovariateMonitor("knn", X_cal, threshold=1000.0),
    ...     ConditionalMonitor(cal_scores, X_cal, threshold=1000.0))
    >>> X = np.vstack([rng.normal(size=(300, 2)), rng.normal(size=(200, 2)) + [6.0, 0.0]])
    >>> scores = np.abs(rng.normal(size=500)) * np.r_[np.ones(300), 5 * np.ones(200)]
    >>> for t in range(500):  # inputs leave the support at t = 300 and the model fails there
    ...     detectors.update(X[t], scores[t])
    ...     for a in detectors.new_alarms:
    ...         print(t, a.detector, a.kind, a.changepoint)
    302 conditional extreme_covariate_shift 185
    310 covariate extreme_covariate_shift 295
    """

    def __init__(
        self,
        covariate: CovariateMonitor,
        conditional: ConditionalMonitor,
        history: int = 10_000,
        outside_level: float = OUTSIDE_SUPPORT_LEVEL,
        penalised_level: float = PENALISED_LEVEL,
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
        self.covariate = covariate
        self.conditional = conditional
        self.history = history
        self.outside_level = outside_level
        self.penalised_level = penalised_level
        self._cov_events = _EventIndex(history)
        self._cond_events = _EventIndex(history)
        self._cond_outside: collections.deque[bool] = collections.deque(maxlen=history)
        self._cond_penalised: collections.deque[bool] = collections.deque(maxlen=history)
        self._new: tuple[DetectorAlarm, ...] = ()

    @classmethod
    def from_config(
        cls, config: StreamConfig, calibration_X: ArrayLike, calibration_scores: ArrayLike
    ) -> StreamDetectors:
        """Both monitors as a :class:`monitor.config.StreamConfig` describes them.

        ``calibration_X`` are the calibration events' features (the covariate scorer's input
        and the density ratio's source), ``calibration_scores`` their conditional scores.
        ``betting``, when the configuration sets it, applies to both monitors; otherwise each
        keeps its own default (Composite Jumper for the covariate monitor, the one-sided Simple
        Mixture for the conditional monitor: ``docs/detectors.md``). ``max_reference`` needs
        ``weighted: false`` (the weighted p-values keep every reference point).
        """
        betting: dict[str, Any] = {}
        if config.betting is not None:
            betting["betting"] = config.betting
        if config.weighted and config.max_reference is not None:
            raise ValueError(
                "max_reference (bounded memory) needs weighted: false; the weighted conformal "
                "p-values keep every reference point"
            )
        cov_alarm = config.covariate_alarm or config.alarm
        covariate = CovariateMonitor(
            config.covariate_score,
            calibration_X,
            rule=cov_alarm.rule,
            threshold=cov_alarm.threshold,
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
            threshold=config.alarm.threshold,
            alpha=config.alarm.alpha,
            batch_size=config.weight_batch,
            rebaseline=config.rebaseline,
            max_reference=config.max_reference,
            seed=config.seed,
            **betting,
        )
        return cls(covariate, conditional)

    @property
    def new_alarms(self) -> tuple[DetectorAlarm, ...]:
        """The alarms raised by the last update call, diagnosed."""
        return self._new

    # ---------------------------------------------------------------------------- updates
    def update(
        self, x: ArrayLike, score: float | None = None, event_index: int | None = None
    ) -> None:
        """A prediction event, with its conditional score if the label is already known."""
        self.update_covariate(x, event_index)
        raised = self._new
        if score is not None:
            self.update_conditional(x, score, event_index)
            self._new = raised + self._new

    def prepare(self, X: ArrayLike) -> None:
        """Score the inputs of prediction events about to arrive in one batch (a poll batch);
        no state change, identical results (:meth:`CovariateMonitor.prepare`)."""
        self.covariate.prepare(X)

    def update_covariate(self, x: ArrayLike, event_index: int | None = None) -> None:
        """Step the covariate monitor with the inputs of one prediction event."""
        self._new = ()
        self._cov_events.add(event_index)
        self.covariate.update(x)
        for event in self.covariate.last_alarms:
            self._new = (*self._new, self._covariate_alarm(event))
            self.conditional.start_adaptation()

    def update_conditional(
        self, x: ArrayLike, score: float, event_index: int | None = None
    ) -> None:
        """Step the conditional monitor with a labelled event's features and score."""
        row = as_row(x, self.covariate.n_features)  # checked once, for both monitors
        self._new = ()
        self._cond_events.add(event_index)
        self._cond_outside.append(self.covariate._is_outside_row(row))
        self.conditional._update_row(row, score)
        self._cond_penalised.append(self.conditional.penalised)
        for event in self.conditional.last_alarms:
            self._new = (*self._new, self._conditional_alarm(event))

    # ------------------------------------------------------------------------ batch updates
    def update_batch(
        self,
        X_cov: FloatArray,
        cov_index: Sequence[int],
        X_cond: FloatArray,
        cond_scores: FloatArray,
        cond_index: Sequence[int],
        cov_before: NDArray[np.int64],
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
        from its trace).
        """
        cov_stat0 = self.covariate.statistic
        cov_alarms: list[tuple[int, AlarmEvent, float]] = []

        def on_covariate(i: int, event: AlarmEvent) -> None:
            outside = _evidence_share(self.covariate.outside_fraction, event)
            cov_alarms.append((i, event, outside))

        cov_trace = _run_batch(self.covariate, X_cov, None, on_covariate)
        result = BatchResult(cov_trace, BatchTrace.empty(0, conditional=True))
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
            alarm = self._record("covariate", kind, event, self._cov_events, evidence)
            result.alarms.append(("covariate", i, alarm))
            self.conditional.start_adaptation()
        segments.append(self._conditional_segment(
            X_cond, cond_scores, cond_index, outside, j0, X_cond.shape[0], cov_before, cov_stats,
            cov_stat0, result,
        ))
        self._cov_events.extend(cov_index[added:])
        result.cond_trace = _concat_traces(segments)
        self._new = result.last_alarms(len(cov_index), cov_before)
        return result

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

        def on_conditional(i: int, event: AlarmEvent) -> None:
            raised.append((j0 + i, event, _ConditionalView(
                cond.penalised_fraction, cond.weights_ess, cond.adapting,
                cond.density_ratio_coefficients,
            )))

        rows = X[j0:j1] if cond.weighted else None
        trace = _run_batch(cond, rows, scores[j0:j1], on_conditional)
        penalised = trace.penalised.tolist() if trace.penalised is not None else [False] * (j1 - j0)
        added = j0
        for j, event, view in raised:
            self._extend_conditional(index, outside, penalised, j0, added, j + 1)
            added = j + 1
            c = int(cov_before[j])
            cov_stat = cov_stat0 if c == 0 else _exp(float(cov_stats[c - 1]))
            alarm = self._conditional_alarm(event, cov_stat, view)
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
        return self._record("conditional", kind, event, self._cond_events, evidence)

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
    ) -> DetectorAlarm:
        monitor = self.covariate if detector == "covariate" else self.conditional
        return DetectorAlarm(
            detector=detector,
            kind=kind,
            event_index=int(index.lookup(event.index) or 0),
            changepoint=index.lookup(event.changepoint),
            statistic=_exp(event.log_statistic),
            threshold=_exp(event.log_threshold),
            rule=monitor.rule,
            evidence=evidence,
        )

    # ---------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state of both monitors and the diagnosis history."""
        return new_state(
            self,
            params={
                "history": self.history,
                "outside_level": self.outside_level,
                "penalised_level": self.penalised_level,
            },
            covariate=self.covariate.state_dict(),
            conditional=self.conditional.state_dict(),
            cov_events=self._cov_events.state(),
            cond_events=self._cond_events.state(),
            cond_outside=np.asarray(self._cond_outside, np.uint8),
            cond_penalised=np.asarray(self._cond_penalised, np.uint8),
            new_alarms=[a.to_json() for a in self._new],
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild from :meth:`state_dict` output; continues exactly."""
        check_state(state, cls)
        obj = cls(
            CovariateMonitor.from_state(state["covariate"]),
            ConditionalMonitor.from_state(state["conditional"]),
            **state["params"],
        )
        obj._cov_events = _EventIndex.load(state["cov_events"])
        obj._cond_events = _EventIndex.load(state["cond_events"])
        obj._cond_outside.extend(np.asarray(state["cond_outside"], bool).tolist())
        obj._cond_penalised.extend(np.asarray(state["cond_penalised"], bool).tolist())
        obj._new = tuple(DetectorAlarm(**a) for a in state["new_alarms"])
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


def _concat_traces(traces: list[BatchTrace]) -> BatchTrace:
    if len(traces) == 1:
        return traces[0]

    def cat(name: str) -> np.ndarray | None:
        parts = [getattr(t, name) for t in traces]
        return None if any(p is None for p in parts) else np.concatenate(parts)

    return BatchTrace(*(cat(name) for name in (  # type: ignore[arg-type]
        "p_value", "log_martingale", "log_statistic", "weights_ess", "penalised"
    )))
