"""One monitored stream: validation against its calibration, label join, detectors, OOD flags.

:class:`StreamMonitor` turns validated events into result records (alarms with diagnoses, trace
points, OOD windows). It holds no I/O; its whole state round-trips through :meth:`state_dict`.

Here: the class and its step (a batch laid out as arrays, the detectors advanced over it, the
records drained). Its parts: the input checks (:mod:`monitor.streams.monitor_inputs`), the
records (:mod:`monitor.streams.monitor_records`), the state and configuration versions
(:mod:`monitor.streams.monitor_versions`).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, overload

import numpy as np

from monitor.core.scores import SCALED_RESIDUALS
from monitor.streams.attribution import AlarmAttribution, CompletedAttribution
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.events import Event, InvalidEvent, PredictionEvent
from monitor.streams.factory import PairScore, build_detectors, build_ood, pair_score
from monitor.streams.join import Joined, LabelJoin, Pending
from monitor.streams.monitor_inputs import ALREADY_PROCESSED, InputChecks, check_calibration
from monitor.streams.monitor_records import opens_attribution
from monitor.streams.monitor_versions import (
    STATE_VERSION,
    FeatureOrderError,
    RetiredDetectors,
    VersionedState,
)
from monitor.streams.performance import ClosedWindow, PerformanceWindows
from monitor.streams.quality import StreamQuality
from monitor.streams.records import (
    Alarm,
    AlarmEvidence,
    OODWindow,
    PerformanceWindow,
    TracePoint,
)
from monitor.streams.schema import FeatureRow

__all__ = ["ALREADY_PROCESSED", "STATE_VERSION", "FeatureOrderError", "StreamMonitor"]


class StreamMonitor(InputChecks, VersionedState):
    """Monitors of one stream, fed with validated events in arrival order.

    Parameters
    ----------
    config
        The stream's configuration.
    calibration
        Labeled events from the model's validation data (never seen in training).
    config_version
        The registered version of ``config`` (1 at registration, + 1 at each update). It is
        stored with the state and named in each alarm's evidence (``config_version``).
    """

    def __init__(
        self, config: StreamConfig, calibration: Calibration, config_version: int = 1
    ) -> None:
        check_calibration(config, calibration)
        self.config = config
        self.config_version = config_version
        #: The event index from which this configuration version is in force.
        self.version_since = 0
        self.calibration = calibration
        self.detectors = build_detectors(config, calibration)
        self.ood = build_ood(config, calibration)
        self.join = LabelJoin(config.labels.max_pending, config.labels.max_delay_seconds)
        self.performance = PerformanceWindows(calibration.n_classes, config.performance.window)
        self.attribution = AlarmAttribution(
            calibration.features, self.feature_names, config.attribution.window,
            schema=None if calibration.schema.is_plain else calibration.schema,
        )
        #: Data quality and schema changes, beside the two monitors (docs/tabular.md).
        self.quality = StreamQuality(config.name, config, calibration.schema, config_version)
        #: Set by a replay of dead letters: an event whose kind and id the label join still
        #: knows (:meth:`LabelJoin.processed`) is refused with an :data:`ALREADY_PROCESSED`
        #: reason instead of being processed a second time. Not part of the state.
        self.refuse_processed = False
        self.event_index = 0
        self.labeled = 0
        self.window_index = 0
        self.last_ts: datetime | None = None
        #: Events processed without a ``ts`` (their time is the broker's or the ingest time;
        #: the alarm budgets count them as updates without an event time).
        self.events_without_ts = 0
        self._alarms: list[Alarm] = []
        self._traces: list[TracePoint] = []
        self._windows: list[OODWindow] = []
        #: Alarms raised as ``insufficient_evidence``, by id, until their revision.
        self._unrevised: dict[str, Alarm] = {}
        #: The detectors of earlier configuration versions, kept only to revise their pending
        #: alarms (:meth:`load_state`), until none is left.
        self._retired: list[RetiredDetectors] = []
        #: Alarms and attribution windows a configuration update could not carry over, closed
        #: with an explicit outcome (:meth:`_carry_over`); drained with the next records.
        self._closed: list[Alarm] = []
        self._unattributed: list[AlarmEvidence] = []
        self._performance: list[PerformanceWindow] = []
        #: Completed attributions, each with the event time of the prediction that completed it.
        self._attributed: list[tuple[CompletedAttribution, datetime]] = []

    # -- batches ------------------------------------------------------------------------------

    def step(
        self, events: Sequence[Event], fallback_ts: Callable[[int], datetime]
    ) -> list[tuple[int, str]]:
        """The batch path: the same results as each event validated and observed in order
        (the per-event reference the tests compare it with: ``tests/support/oracle.py``).

        One pass in Python validates the events, keeps the label store and lays out the
        batch's work as arrays (the predictions' inputs, the joined labels' scores, where each
        label joined among the predictions); then each monitor advances over the whole batch in
        one call (:meth:`StreamDetectors.update_batch`, :meth:`OODDecider.add_many`) and only
        what is stored becomes a record: alarms, every ``trace_every``-th trace point, OOD
        windows. ``fallback_ts(k)`` is the time of event k when it has no ``ts``: the label
        join and the records use it, the time budgets do not (an update without an event time
        runs on the budget's event-count threshold; :attr:`events_without_ts` counts them).
        Returns the events that do not fit the stream as ``(k, reason)``; they change nothing.
        """
        batch = _Batch()
        rejected: list[tuple[int, str]] = []
        ood_kinds = () if self.ood is None else self.ood.input_kinds
        join = self.join
        waiting = join.predictions  # read only: a duplicate id is refused before any change
        ready = join.ready  # the pairs the last event joined (a live view, mostly empty)
        marked = join.marked  # predictions made under an earlier version may wait
        refuse = self.refuse_processed
        regression = self.calibration.n_classes is None
        d = self.calibration.n_features
        needs_scale = self.config.conditional_score in SCALED_RESIDUALS
        inline = self._reads_inline(ood_kinds)
        score = pair_score(self.config)
        times = _event_times(events, fallback_ts)
        predictions, cov_ts, pairs, before = (batch.predictions, batch.cov_ts, batch.joined,
                                              batch.cond_before)
        add_prediction, add_label = join.add_prediction, join.add_label
        if times.seconds:
            join.defer_expiry(min(times.seconds), max(times.seconds), len(events))
        try:
            for k, event in enumerate(events):
                ts, seconds = times.ts[k], times.seconds[k]
                untimed = times.untimed[k]
                try:
                    if isinstance(event, PredictionEvent):
                        features: Any = event.features
                        read = None
                        # The common case inline (a list of d numbers, a number, no logits or
                        # embedding); anything else through the full checks, with their
                        # messages. (the decoders give a list only of numbers: a feature list
                        # with a string, a boolean or a null decodes to a tuple)
                        if inline and type(features) is list and len(features) == d \
                                and event.logits is None and event.embedding is None:
                            inputs = _NO_INPUTS
                        else:
                            features, read = self._read_features(event)
                            inputs = self._ood_lists(event, ood_kinds)
                        raw = event.prediction
                        prediction: float | tuple[float, ...] = (
                            raw if regression and isinstance(raw, float)
                            else self._prediction(event)
                        )
                        scale = event.scale if needs_scale else None
                        if needs_scale and scale is None:
                            self._scale(event)  # raises, with its message
                        label = event.label
                        if label is not None and not (regression and type(label) is float):
                            self._check_label(label)  # raises, with its message
                        if refuse:
                            self._check_not_processed("prediction", event.id)
                        if event.id in waiting:
                            raise InvalidEvent(f"duplicate prediction id {event.id!r} (still "
                                               "waiting for its label)")
                        index = self.event_index
                        self.event_index = index + 1
                        pending = Pending(event.id, index, seconds, tuple(features), prediction,
                                          scale, None, untimed)
                        predictions.append(pending)
                        cov_ts.append(ts)
                        if inputs:
                            batch.add_inputs(inputs)
                        if read is not None:
                            batch.add_read(read)
                        add_prediction(pending)
                        if label is not None:
                            add_label(event.id, label, seconds)
                    else:
                        if not (regression and type(event.label) is float):
                            self._check_label(event.label)  # raises, with its message
                        if refuse:
                            self._check_not_processed("label", event.id)
                        if marked:
                            self._check_made_under(waiting.get(event.id))
                        add_label(event.id, event.label, seconds)
                except InvalidEvent as exc:
                    rejected.append((k, str(exc)))
                    continue
                self.last_ts = ts
                if untimed:
                    self.events_without_ts += 1
                if ready:
                    for joined in join.drain():
                        pairs.append(joined)
                        before.append(len(predictions))
        finally:
            join.catch_up()
        if predictions or pairs:
            batch.lay_out(score)
            self._advance(batch)
        return rejected

    def _reads_inline(self, ood_kinds: tuple[str, ...]) -> bool:
        """Whether a prediction whose features are a list of numbers of the stream's width,
        without logits or embedding, needs no other check of its inputs: a stream of plain
        numeric features by position whose OOD rule reads no logits nor embedding."""
        calibration = self.calibration
        return calibration.feature_names is None and calibration.schema.is_plain \
            and "logits" not in ood_kinds and "embedding" not in ood_kinds

    def _advance(self, batch: _Batch) -> None:
        """Both monitors and the OOD rule over the batch laid out by :meth:`step`."""
        d = self.calibration.n_features
        schema = self.calibration.schema
        # code rows (docs/tabular.md); the detectors and the OOD scorers read their embedding
        C_cov = np.array(batch.cov_rows, np.float64).reshape(len(batch.cov_rows), d)
        C_cond = np.array(batch.cond_rows, np.float64).reshape(len(batch.cond_rows), d)
        X_cov, X_cond = schema.encode(C_cov), schema.encode(C_cond)
        budgets = self.detectors.budgets
        # the predictions' event times in seconds, once, for the time budgets that read them
        # (NaN: an event without ts, an update without an event time)
        cov_seconds = _timed(batch.cov_seconds, batch.cov_untimed) \
            if "covariate" in budgets or self.quality.budget is not None else None
        result = self.detectors.update_batch(
            X_cov, batch.cov_index, X_cond, np.array(batch.cond_scores, np.float64),
            batch.cond_index, np.array(batch.cond_before, np.int64),
            cov_ts=cov_seconds if "covariate" in budgets else None,
            cond_ts=_timed(batch.cond_seconds, batch.cond_untimed)
            if "conditional" in budgets else None,
            cond_outside=batch.cond_outside, cond_from=batch.cond_from,
        )
        if result.cov_trace.outside is not None:  # scored once: the label reads it from the join
            self.join.keep_outside(batch.cov_ids, result.cov_trace.outside.tolist())
        traces: list[tuple[int, int, TracePoint]] = []
        alarms: list[tuple[int, Alarm]] = []
        every = self.config.trace_every
        for i in range(every - 1 - batch.cov_index[0] % every, len(batch.cov_index), every) \
                if batch.cov_index else ():
            point = self._traced("covariate", result, i, batch.cov_index[i], batch.cov_ts[i])
            traces.append((batch.cov_seq[i], 1, point))
        labeled0 = self.labeled
        self.labeled += len(batch.cond_index)
        for j in range(every - 1 - labeled0 % every, len(batch.cond_index), every):
            point = self._traced("conditional", result, j, batch.cond_index[j], batch.cond_ts[j])
            traces.append((batch.cond_seq[j], 1, point))
        for detector, i, raised in result.alarms:
            if detector == "covariate":
                seq, event_id = batch.cov_seq[i], batch.cov_ids[i]
                index, ts = batch.cov_index[i], batch.cov_ts[i]
            else:
                seq, event_id = batch.cond_seq[i], batch.cond_ids[i]
                index, ts = batch.cond_index[i], batch.cond_ts[i]
            alarms.append((seq, self._alarm_record(raised, event_id, index, ts)))
            if raised.revision == 1:
                traces.append((seq, 0, self._traced(detector, result, i, index, ts)))
        retired_windows: dict[str, RetiredDetectors] = {}
        for retired in self._retired:  # after the alarms of the same update, as per event
            for detector, i, raised in retired.detectors.track_pending(
                X_cov, batch.cov_index, X_cond, batch.cond_index
            ):
                covariate = detector == "covariate"
                seq = (batch.cov_seq if covariate else batch.cond_seq)[i]
                alarm = self._retired_revision(
                    raised, (batch.cov_ts if covariate else batch.cond_ts)[i]
                )
                alarms.append((seq, alarm))
                retired_windows[alarm.id] = retired
        self._retired = [r for r in self._retired if r.detectors.pending]
        if batch.cov_index:
            alarms += [(batch.cov_seq[i], alarm) for i, alarm in self.quality.update(
                self._quality_matrix(C_cov, batch.quality), batch.cov_index, batch.cov_ids,
                batch.cov_ts, batch.keys, cov_seconds)]
        alarms.sort(key=lambda item: item[0])
        traces.sort(key=lambda item: item[:2])
        self._attribute_batch(batch, C_cov, alarms, retired_windows)
        self._add_performance(self.performance.add(
            batch.cond_predictions, batch.cond_labels, batch.cond_index, batch.cond_ts
        ))
        self._alarms += [alarm for _, alarm in alarms]
        self._traces += [point for _, _, point in traces]
        if self.ood is not None and batch.cov_index:
            first = batch.cov_index[0]
            inputs = {"features": X_cov}
            for kind, rows in batch.ood_rows.items():
                inputs[kind] = np.array(rows, np.float64)
            self.ood.add_many(batch.cov_ids, inputs)
            for decision in self.ood.windows():
                ts = batch.cov_ts[decision.end_index - first]
                self._windows.append(self._window_record(decision, ts))

    def _quality_matrix(
        self, C_cov: np.ndarray, read: Sequence[tuple[int, tuple[bool, ...]]]
    ) -> np.ndarray:
        """The (n, k) data-quality indicators of prediction events with code rows ``C_cov``:
        vectorised from the codes for a stream of numeric features, else as the schema read
        each event (``read``: ``(position, indicators)``)."""
        schema = self.calibration.schema
        if all(kind == "numeric" for kind in schema.kinds):
            return schema.numeric_quality(C_cov)
        out = np.zeros((C_cov.shape[0], len(schema.indicators)), dtype=bool)
        for position, quality in read:
            out[position] = quality
        return out

    def _attribute_batch(
        self, batch: _Batch, X_cov: np.ndarray, alarms: list[tuple[int, Alarm]],
        retired: dict[str, RetiredDetectors],
    ) -> None:
        """Feed the batch's predictions to the attribution windows, each alarm's window opened
        where the per-event path opens it: after the prediction or label that raised it, or
        that revised it into an alarm that needs one (:func:`opens_attribution`)."""
        def add(lo: int, hi: int) -> None:
            first = batch.cov_index[0]
            self._attributed += [
                (d, batch.cov_ts[int(d.attribution["window"]["end_index"]) - first])
                for d in self.attribution.add(X_cov[lo:hi], batch.cov_index[lo])
            ]

        done = 0
        for seq, alarm in alarms:
            if not opens_attribution(alarm):
                continue
            start = int(np.searchsorted(batch.cov_seq, seq, side="right"))
            if start > done:
                add(done, start)
                done = start
            if alarm.id in retired:
                self.attribution.open(alarm.id, *retired[alarm.id].window)
            else:
                self.attribution.open(alarm.id)
        if done < len(batch.cov_index):
            add(done, len(batch.cov_index))

    def _add_performance(self, closed: list[ClosedWindow]) -> None:
        self._performance += [
            PerformanceWindow(self.name, w.window_index, w.start_index, w.end_index, w.ts, w.n,
                              w.metrics)
            for w in closed
        ]

    def _alarm_evidence(self) -> list[AlarmEvidence]:
        """The completed attributions as evidence of their alarms (after the windows a
        configuration update closed)."""
        out = self._unattributed + [
            AlarmEvidence(self.name, done.alarm_id, {"attribution": done.attribution}, ts)
            for done, ts in self._attributed
        ]
        self._attributed, self._unattributed = [], []
        return out

    def flush(self) -> bool:
        """Close a partial OOD window; True if anything new is ready to drain."""
        if self.ood is None:
            return False
        decision = self.ood.flush()
        if decision is not None:
            self._windows.append(self._window_record(decision, self.last_ts or datetime.now(UTC)))
        return bool(self._windows or self._alarms or self._traces or self._performance
                    or self._attributed or self._closed or self._unattributed)

    def drain(self) -> tuple[list[Alarm], list[TracePoint], list[OODWindow]]:
        """The records produced since the last drain: alarms, trace points, OOD windows (the
        performance windows and late alarm evidence: :meth:`drain_explanations`)."""
        drained = self._closed + self._alarms, self._traces, self._windows
        self._closed, self._alarms, self._traces, self._windows = [], [], [], []
        return drained

    def drain_explanations(self) -> tuple[list[PerformanceWindow], list[AlarmEvidence]]:
        """The performance windows closed and the evidence that completes earlier alarms (their
        feature attributions) since the last call (docs/explain.md)."""
        drained = self._performance, self._alarm_evidence()
        self._performance = []
        return drained


@dataclass(slots=True)
class _Batch:
    """A stream's share of a poll batch laid out for the batch calls: the valid predictions
    (``cov_*``, in arrival order) and the labelled events (``cond_*``, in the order their labels
    joined; ``cond_before[j]``: predictions of the batch that came before). ``*_seq`` numbers
    both kinds of update in arrival order, to keep the records in the per-event order.

    The pass over the events keeps only each prediction as it waits for its label
    (:class:`Pending`), its time and each pair joined; :meth:`lay_out` makes the columns from
    them, each in one go."""

    predictions: list[Pending] = field(default_factory=list)
    cov_ts: list[datetime] = field(default_factory=list)
    joined: list[Joined] = field(default_factory=list)
    cond_before: list[int] = field(default_factory=list)
    ood_rows: dict[str, list[list[float]]] = field(default_factory=dict)
    #: ``(position, indicators)`` of the predictions the schema read (docs/tabular.md)
    quality: list[tuple[int, tuple[bool, ...]]] = field(default_factory=list)
    #: ``(position, unknown keys, absent features)`` of the predictions that had any
    keys: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = field(default_factory=list)
    # -- the columns (:meth:`lay_out`)
    cov_rows: Sequence[tuple[float, ...]] = ()
    cov_index: Sequence[int] = ()
    cov_ids: Sequence[str] = ()
    cov_seconds: Sequence[float] = ()
    cov_seq: list[int] = field(default_factory=list)
    #: positions of the predictions, and of the labelled events, whose prediction had no ts
    cov_untimed: list[int] = field(default_factory=list)
    cond_untimed: list[int] = field(default_factory=list)
    cond_rows: Sequence[tuple[float, ...]] = ()
    cond_scores: list[float] = field(default_factory=list)
    cond_index: Sequence[int] = ()
    cond_seconds: Sequence[float] = ()
    cond_ts: _UTCTimes = field(init=False)
    cond_ids: Sequence[str] = ()
    cond_seq: list[int] = field(default_factory=list)
    cond_predictions: Sequence[Any] = ()
    cond_labels: Sequence[Any] = ()
    #: the support flag kept with the labelled event's prediction (None: not known), and the
    #: position of that prediction among the batch's (-1: an earlier batch's)
    cond_outside: Sequence[bool | None] = ()
    cond_from: list[int] = field(default_factory=list)

    def add_read(self, read: FeatureRow) -> None:
        """What the schema read of the last prediction added: its indicators, its keys."""
        position = len(self.predictions) - 1
        self.quality.append((position, read.quality))
        if read.unknown or read.absent:
            self.keys.append((position, read.unknown, read.absent))

    def add_inputs(self, inputs: Mapping[str, list[float]]) -> None:
        """The OOD inputs other than the features of the last prediction added."""
        for kind, value in inputs.items():
            self.ood_rows.setdefault(kind, []).append(value)

    def lay_out(self, score: PairScore) -> None:
        """The columns of the predictions and of the pairs joined (``score``: of a pair)."""
        n = len(self.predictions)
        if n:
            (self.cov_ids, self.cov_index, self.cov_seconds, self.cov_rows, *_,
             untimed, _) = zip(*self.predictions, strict=True)
            self.cov_untimed = [i for i, u in enumerate(untimed) if u]
        before = self.cond_before
        self.cov_seq = [i + bisect_right(before, i) for i in range(n)] if before \
            else list(range(n))
        self.cond_seq = [j + b for j, b in enumerate(before)]
        self.cond_ts = _UTCTimes(self.cond_seconds)
        if not self.joined:
            return
        pendings, self.cond_labels = zip(*self.joined, strict=True)
        (self.cond_ids, self.cond_index, self.cond_seconds, self.cond_rows,
         self.cond_predictions, scales, _, untimed, self.cond_outside) = zip(*pendings,
                                                                              strict=True)
        self.cond_ts = _UTCTimes(self.cond_seconds)
        self.cond_untimed = [j for j, u in enumerate(untimed) if u]
        self.cond_scores = list(map(score, self.cond_predictions, self.cond_labels, scales))
        first = self.cov_index[0] if n else math.inf
        self.cond_from = [int(e - first) if e >= first else -1 for e in self.cond_index]


def _timed(seconds: Sequence[float], untimed: Sequence[int]) -> list[float]:
    """Event times in epoch seconds, NaN at the positions ``untimed`` (no event time)."""
    out = list(seconds)
    for i in untimed:
        out[i] = math.nan
    return out


_NO_INPUTS: Mapping[str, list[float]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class _EventTimes:
    """A batch's event times: each event's ``ts`` (the fallback where it has none, UTC where
    it is naive), as epoch seconds, and whether it had none; computed once per batch."""

    ts: list[datetime]
    seconds: list[float]
    untimed: list[bool]


def _event_times(events: Sequence[Event], fallback_ts: Callable[[int], datetime]) -> _EventTimes:
    given = [event.ts for event in events]
    untimed = [ts is None for ts in given]
    timed: list[datetime] = [fallback_ts(k) if ts is None else ts for k, ts in enumerate(given)] \
        if any(untimed) else given  # type: ignore[assignment]
    ts = [t if t.tzinfo is not None else t.replace(tzinfo=UTC) for t in timed]
    return _EventTimes(ts, [t.timestamp() for t in ts], untimed)


class _UTCTimes(Sequence[datetime]):
    """Epoch seconds read as UTC datetimes where a record needs one: of a batch's labelled
    events, only the few traced, alarmed or closing a window become records."""

    __slots__ = ("_seconds",)

    def __init__(self, seconds: Sequence[float]) -> None:
        self._seconds = seconds

    def __len__(self) -> int:
        return len(self._seconds)

    @overload
    def __getitem__(self, i: int) -> datetime: ...

    @overload
    def __getitem__(self, i: slice) -> list[datetime]: ...

    def __getitem__(self, i: int | slice) -> datetime | list[datetime]:
        if isinstance(i, slice):
            return [datetime.fromtimestamp(s, UTC) for s in self._seconds[i]]
        return datetime.fromtimestamp(self._seconds[i], UTC)
