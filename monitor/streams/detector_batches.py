"""A poll batch through :class:`monitor.streams.detectors.StreamDetectors`: each monitor
advanced in one compiled call per segment (the covariate monitor over the whole batch, the
conditional monitor in segments that end at each covariate alarm), with the same results as the
per-event updates.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.detectors import AlarmEvent, ConditionalMonitor, CovariateMonitor
from monitor.core.detectors.base import BatchTrace, FloatArray
from monitor.core.diagnosis import RECENT, diagnose_covariate
from monitor.core.martingales.alarms import Ville
from monitor.streams.detector_diagnosis import (
    AlarmDiagnosis,
    ConditionalView,
    DetectorAlarm,
    capped_exp,
    evidence_share,
)

__all__ = ["BatchResult", "BatchUpdates"]


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



class BatchUpdates(AlarmDiagnosis):
    """The batch path of :class:`monitor.streams.detectors.StreamDetectors` (a mixin: the
    attributes below are set by its constructor)."""

    history: int
    _new: tuple[DetectorAlarm, ...]

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
        cond_outside: Sequence[bool | None] | None = None,
        cond_from: Sequence[int] | None = None,
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
        read by a detector with a time budget (None, or NaN for one update: no event time, the
        budget's event-count threshold; :class:`EventRateThreshold`): its monitor then runs in
        spans of one threshold each (``BatchResult.cov_thresholds`` / ``cond_thresholds``).

        A labelled event's support flag (for the diagnosis) is the one the covariate monitor
        gave its prediction, not scored again: ``cond_outside[j]`` the flag kept with a
        prediction of an earlier batch (None: not kept), ``cond_from[j]`` the position of its
        prediction among this batch's (-1: an earlier batch's), whose flag the covariate pass
        gives (``BatchTrace.outside``). Only a labelled event with neither is scored again
        (both None: every one), with the same flag.

        A batch longer than :meth:`_batch_limit` updates runs as two halves in arrival order
        (the same results): a revision is decided at the batch's end from the recent support
        flags, which must still be kept then.
        """
        n, m = X_cov.shape[0], X_cond.shape[0]
        if n + m > self._batch_limit():
            return self._split_batch(X_cov, cov_index, X_cond, cond_scores, cond_index, cov_before,
                                     cov_ts, cond_ts, cond_outside, cond_from)
        cov_thr = self._budget_thresholds("covariate", cov_ts, len(cov_index))
        cond_thr = self._budget_thresholds("conditional", cond_ts, len(cond_index))
        cov_seg = _segment_thresholds(self.covariate, len(cov_index))
        cond_seg = _segment_thresholds(self.conditional, len(cond_index))
        cov_stat0 = self.covariate.statistic
        cov_n0, cond_n0 = self.covariate.n_seen, self._cond_events.n
        cov_alarms: list[tuple[int, AlarmEvent, float]] = []

        def on_covariate(i: int, event: AlarmEvent) -> None:
            outside = evidence_share(self.covariate.outside_fraction, event)
            cov_alarms.append((i, event, outside))
            if cov_seg is not None:
                cov_seg[i:] = self.covariate.threshold  # the next segment's, from the alarm on

        cov_trace = _run_budgeted(self.covariate, X_cov, None, on_covariate, cov_thr)
        result = BatchResult(cov_trace, BatchTrace.empty(0, conditional=True),
                             cov_thresholds=cov_thr if cov_seg is None else cov_seg,
                             cond_thresholds=cond_thr if cond_seg is None else cond_seg)
        outside = self._labelled_support(X_cond, cov_trace.outside, cond_outside, cond_from)
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
            evidence = self._evidence(event, capped_exp(event.log_statistic), self.conditional)
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

    def _labelled_support(
        self,
        X_cond: FloatArray,
        batch_flags: NDArray[np.bool_] | None,
        kept: Sequence[bool | None] | None,
        positions: Sequence[int] | None,
    ) -> list[bool]:
        """The support flag of each labelled event: kept with its prediction, else its
        prediction's in this batch (``batch_flags``), else scored now (:meth:`update_batch`)."""
        m = X_cond.shape[0]
        flags: list[bool | None] = [None] * m if kept is None else list(kept)
        if positions is not None and batch_flags is not None:
            known = batch_flags.tolist()
            for j, position in enumerate(positions):
                if flags[j] is None and position >= 0:
                    flags[j] = known[position]
        missing = [j for j, flag in enumerate(flags) if flag is None]
        if missing:
            scored = self.covariate.is_outside(X_cond[missing]).tolist()
            for j, flag in zip(missing, scored, strict=True):
                flags[j] = flag
        return flags  # type: ignore[return-value]

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
        cond_outside: Sequence[bool | None] | None = None,
        cond_from: Sequence[int] | None = None,
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
            None if cond_outside is None else cond_outside[:q],
            None if cond_from is None else cond_from[:q],
        )
        kept, positions = cond_outside, cond_from
        if positions is not None and first.cov_trace.outside is not None:
            # a second-half label of a first-half prediction: that prediction's flag is known
            flags = first.cov_trace.outside.tolist()
            kept = [flags[f] if 0 <= f < p else None if kept is None else kept[j]
                    for j, f in enumerate(positions)]
            positions = [f - p if f >= p else -1 for f in positions]
        second = self.update_batch(
            X_cov[p:], cov_index[p:], X_cond[q:], cond_scores[q:], cond_index[q:],
            cov_before[q:] - p, None if cts is None else cts[p:], None if dts is None else dts[q:],
            None if kept is None else kept[q:], None if positions is None else positions[q:],
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
        raised: list[tuple[int, AlarmEvent, ConditionalView]] = []
        cond = self.conditional

        budgeted = "conditional" in self.budgets
        moving = result.cond_thresholds

        def on_conditional(i: int, event: AlarmEvent) -> None:
            raised.append((j0 + i, event, ConditionalView(
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
            cov_stat = cov_stat0 if c == 0 else capped_exp(float(cov_stats[c - 1]))
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

    def _budget_thresholds(
        self, detector: str, ts: ArrayLike | None, n: int
    ) -> FloatArray | None:
        budget = self.budgets.get(detector)
        if budget is None:
            return None
        if ts is None:  # no event times: the event-count threshold
            return budget.thresholds(np.full(n, np.nan))
        arr = np.asarray(ts, dtype=np.float64).reshape(-1)
        if arr.size != n:
            raise ValueError(f"{detector} event times: {arr.size} for {n} updates")
        return budget.thresholds(arr)


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


def _concat_traces(traces: list[BatchTrace]) -> BatchTrace:
    if len(traces) == 1:
        return traces[0]

    def cat(name: str) -> np.ndarray | None:
        parts = [getattr(t, name) for t in traces]
        return None if any(p is None for p in parts) else np.concatenate(parts)

    return BatchTrace(*(cat(name) for name in (  # type: ignore[arg-type]
        "p_value", "log_martingale", "log_statistic", "weights_ess", "penalised", "outside"
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
