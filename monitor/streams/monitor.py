"""One monitored stream: validation against its calibration, label join, detectors, OOD flags.

:class:`StreamMonitor` turns validated events into result records (alarms with diagnoses, trace
points, OOD windows). It holds no I/O; its whole state round-trips through :meth:`state_dict`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from monitor.core.decisions.decider import OODDecider
from monitor.core.diagnosis import INSUFFICIENT_EVIDENCE
from monitor.core.scores import SCALED_RESIDUALS
from monitor.errors import MonitorError
from monitor.streams.attribution import (
    AlarmAttribution,
    CompletedAttribution,
    density_ratio_directions,
)
from monitor.streams.calibration import Calibration, CalibrationError
from monitor.streams.config import BUDGET_SHARE, AlarmConfig, StreamConfig
from monitor.streams.detectors import BatchResult, DetectorAlarm, StreamDetectors
from monitor.streams.durations import format_duration
from monitor.streams.events import Event, InvalidEvent, PredictionEvent
from monitor.streams.factory import build_detectors, build_ood, conditional_score
from monitor.streams.join import Joined, LabelJoin, Pending
from monitor.streams.performance import ClosedWindow, PerformanceWindows
from monitor.streams.records import (
    Alarm,
    AlarmEvidence,
    OODWindow,
    PerformanceWindow,
    TracePoint,
    alarm_id,
)

STATE_VERSION = 1

#: How the reason begins when a replay refuses an event the stream already processed
#: (:attr:`StreamMonitor.refuse_processed`; ``monitor.cli.dead_letters`` counts these as
#: skipped).
ALREADY_PROCESSED = "already processed"


class FeatureOrderError(MonitorError, ValueError):
    """A stream whose features cannot be read in the order its state or calibration needs (the
    message says which stream, the two orders and the fix): the stream is stopped, never run
    with its feature columns permuted."""


class StreamMonitor:
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
        _check_calibration(config, calibration)
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
            calibration.features, self.feature_names, config.attribution.window
        )
        #: Set by a replay of dead letters: an event whose kind and id the label join still
        #: knows (:meth:`LabelJoin.processed`) is refused with an :data:`ALREADY_PROCESSED`
        #: reason instead of being processed a second time. Not part of the state.
        self.refuse_processed = False
        self.event_index = 0
        self.labeled = 0
        self.window_index = 0
        self.last_ts: datetime | None = None
        self._alarms: list[Alarm] = []
        self._traces: list[TracePoint] = []
        self._windows: list[OODWindow] = []
        #: Alarms raised as ``insufficient_evidence``, by id, until their revision.
        self._unrevised: dict[str, Alarm] = {}
        #: The detectors of earlier configuration versions, kept only to revise their pending
        #: alarms (:meth:`load_state`), until none is left.
        self._retired: list[_Retired] = []
        #: Alarms and attribution windows a configuration update could not carry over, closed
        #: with an explicit outcome (:meth:`_carry_over`); drained with the next records.
        self._closed: list[Alarm] = []
        self._unattributed: list[AlarmEvidence] = []
        self._performance: list[PerformanceWindow] = []
        #: Completed attributions, each with the event time of the prediction that completed it.
        self._attributed: list[tuple[CompletedAttribution, datetime]] = []

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The features' names: the calibration's, else ``x0``, ``x1``, … by position."""
        names = self.calibration.feature_names
        return names if names is not None else tuple(
            f"x{j}" for j in range(self.calibration.n_features)
        )

    # -- events -------------------------------------------------------------------------------

    def _check_not_processed(self, kind: str, event_id: str) -> None:
        """With :attr:`refuse_processed` (a replay), refuse an event of ``kind`` and
        ``event_id`` that the stream's label join still knows (waiting, or joined within the
        join's bounds), before any state changes."""
        if self.refuse_processed and self.join.processed(kind, event_id):
            raise InvalidEvent(
                f"{ALREADY_PROCESSED}: stream {self.name!r} has processed a {kind} with id "
                f"{event_id!r} within its label-join window"
            )

    def _check_made_under(self, pending: Pending | None) -> None:
        """Refuse the label of a waiting prediction (``pending``; None: none waits) made under
        an earlier configuration version whose features this version's detectors cannot use
        (other names, or, where the state did not keep the names, another number):
        :class:`InvalidEvent`, so the label is a dead letter with this reason and changes
        nothing — the prediction waits on until the join expires it. Labels of predictions made
        under a version with the same features join as usual."""
        made = None if pending is None else self.join.made_under(pending.event_id)
        if pending is None or made is None:
            return
        version, names = made
        if names is None:
            if len(pending.features) == self.calibration.n_features:
                return
            before = f"{len(pending.features)} values"
        elif names == self.feature_names:
            return
        else:
            before = _listed(names)
        raise InvalidEvent(
            f"label of prediction {pending.event_id!r} made under configuration version "
            f"{version}, whose features ({before}) the version {self.config_version} "
            f"detectors ({_listed(self.feature_names)}) cannot use"
        )

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
        windows. ``fallback_ts(k)`` is the time of event k when it has no ``ts``. Returns the
        events that do not fit the stream as ``(k, reason)``; they change nothing.
        """
        batch = _Batch()
        rejected: list[tuple[int, str]] = []
        ood_kinds = () if self.ood is None else self.ood.input_kinds
        join, config = self.join, self.config
        waiting = join.predictions  # read only: a duplicate id is refused before any change
        ready = join.ready  # the pairs the last event joined (a live view, mostly empty)
        marked = join.marked  # predictions made under an earlier version may wait
        refuse = self.refuse_processed
        regression = self.calibration.n_classes is None
        d = self.calibration.n_features
        needs_scale = config.conditional_score in SCALED_RESIDUALS
        plain = self.calibration.feature_names is None and not ood_kinds \
            and self.calibration.logits is None and self.calibration.embedding is None
        for k, event in enumerate(events):
            ts = event.ts or fallback_ts(k)
            if ts.tzinfo is None:
                ts = ts.replace(tzinfo=UTC)
            try:
                if isinstance(event, PredictionEvent):
                    features = event.features
                    # The common case inline (a list of d numbers, a number, no OOD inputs);
                    # anything else through the full checks, with their messages.
                    if not (plain and type(features) is list and len(features) == d
                            and event.logits is None and event.embedding is None):
                        features = self._feature_list(event)
                        self._ood_lists(event, ood_kinds)
                    raw = event.prediction
                    prediction: float | tuple[float, ...] = (
                        raw if regression and isinstance(raw, float) else self._prediction(event)
                    )
                    scale = event.scale if needs_scale else None
                    if needs_scale and scale is None:
                        self._scale(event)  # raises, with its message
                    label = event.label
                    if label is not None:
                        self._check_label(label)
                    if refuse:
                        self._check_not_processed("prediction", event.id)
                    if event.id in waiting:
                        raise InvalidEvent(
                            f"duplicate prediction id {event.id!r} (still waiting for its label)"
                        )
                    index = self.event_index
                    self.event_index = index + 1
                    batch.add_prediction(event.id, index, ts, features,
                                         self._ood_lists(event, ood_kinds) if ood_kinds else {})
                    seconds = ts.timestamp()
                    join.add_prediction(Pending(event.id, index, seconds, tuple(features),
                                                prediction, scale))
                    if label is not None:
                        join.add_label(event.id, label, seconds)
                else:
                    self._check_label(event.label)
                    if refuse:
                        self._check_not_processed("label", event.id)
                    if marked:
                        self._check_made_under(waiting.get(event.id))
                    join.add_label(event.id, event.label, ts.timestamp())
            except InvalidEvent as exc:
                rejected.append((k, str(exc)))
                continue
            self.last_ts = ts
            if ready:
                for joined in join.drain():
                    batch.add_joined(joined, config)
        if batch.cov_index or batch.cond_index:
            self._advance(batch)
        return rejected

    def _advance(self, batch: _Batch) -> None:
        """Both monitors and the OOD rule over the batch laid out by :meth:`step`."""
        d = self.calibration.n_features
        X_cov = np.array(batch.cov_rows, np.float64).reshape(len(batch.cov_rows), d)
        X_cond = np.array(batch.cond_rows, np.float64).reshape(len(batch.cond_rows), d)
        budgets = self.detectors.budgets
        result = self.detectors.update_batch(
            X_cov, batch.cov_index, X_cond, np.array(batch.cond_scores, np.float64),
            batch.cond_index, np.array(batch.cond_before, np.int64),
            cov_ts=[t.timestamp() for t in batch.cov_ts] if "covariate" in budgets else None,
            cond_ts=[t.timestamp() for t in batch.cond_ts] if "conditional" in budgets else None,
        )
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
        retired_windows: dict[str, _Retired] = {}
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
        alarms.sort(key=lambda item: item[0])
        traces.sort(key=lambda item: item[:2])
        self._attribute_batch(batch, X_cov, alarms, retired_windows)
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

    def _attribute_batch(
        self, batch: _Batch, X_cov: np.ndarray, alarms: list[tuple[int, Alarm]],
        retired: dict[str, _Retired],
    ) -> None:
        """Feed the batch's predictions to the attribution windows, each alarm's window opened
        where the per-event path opens it: after the prediction or label that raised it, or
        that revised it into an alarm that needs one (:func:`_opens_attribution`)."""
        def add(lo: int, hi: int) -> None:
            first = batch.cov_index[0]
            self._attributed += [
                (d, batch.cov_ts[int(d.attribution["window"]["end_index"]) - first])
                for d in self.attribution.add(X_cov[lo:hi], batch.cov_index[lo])
            ]

        done = 0
        for seq, alarm in alarms:
            if not _opens_attribution(alarm):
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

    def _traced(
        self, detector: str, result: BatchResult, i: int, index: int, ts: datetime
    ) -> TracePoint:
        """The trace point of a detector's update i of a batch (its values from the trace)."""
        covariate = detector == "covariate"
        trace = result.cov_trace if covariate else result.cond_trace
        thresholds = result.cov_thresholds if covariate else result.cond_thresholds
        ess = None if covariate else _finite(float(trace.weights_ess[i]))  # type: ignore[index]
        monitor = self.detectors.covariate if covariate else self.detectors.conditional
        threshold = monitor.threshold if thresholds is None else float(thresholds[i])
        return TracePoint(
            stream=self.name,
            detector=detector,
            event_index=index,
            ts=ts,
            log_martingale=_finite(float(trace.log_martingale[i])),
            p_value=_finite(float(trace.p_value[i])),
            log_statistic=_finite(float(trace.log_statistic[i])),
            log_threshold=_finite(math.log(threshold)),
            weights_ess=ess,
            config_version=self.config_version,
        )

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

    # -- records ------------------------------------------------------------------------------

    def _alarm_record(
        self, raised: DetectorAlarm, event_id: str, index: int, ts: datetime
    ) -> Alarm:
        """The record of an alarm raised at event ``index`` or, for a revision, of the alarm it
        revises, revised at ``ts`` (the event that completed its evidence)."""
        evidence = _json_safe({
            **self._named_directions(raised.evidence), **self._budget_evidence(raised),
            "config_version": self.config_version,
        })
        if raised.revision > 1:
            original = self._unrevised.pop(alarm_id(self.name, raised.detector,
                                                    raised.event_index))
            return dataclasses.replace(original, kind=raised.kind, evidence=evidence,
                                       revision=raised.revision, revised_at=ts)
        record = self._new_alarm_record(raised, event_id, index, ts, evidence)
        if raised.kind == INSUFFICIENT_EVIDENCE:
            self._unrevised[record.id] = record
        return record

    def _retired_revision(self, raised: DetectorAlarm, ts: datetime) -> Alarm:
        """The revision of an alarm raised under an earlier configuration version: decided by
        that version's detectors (their support test), so its evidence is the alarm's, with
        the revision's shares and the version in force when it was revised."""
        original = self._unrevised.pop(alarm_id(self.name, raised.detector, raised.event_index))
        evidence = _json_safe({
            **original.evidence,
            **{key: raised.evidence[key] for key in _REVISION_KEYS},
            "revised_under_config_version": self.config_version,
        })
        return dataclasses.replace(original, kind=raised.kind, evidence=evidence,
                                   revision=raised.revision, revised_at=ts)

    def _new_alarm_record(
        self, raised: DetectorAlarm, event_id: str, index: int, ts: datetime,
        evidence: dict[str, Any],
    ) -> Alarm:
        return Alarm(
            stream=self.name,
            detector=raised.detector,
            kind=raised.kind,
            event_id=event_id,
            event_index=index,
            ts=ts,
            changepoint=raised.changepoint,
            statistic=raised.statistic,
            threshold=self._threshold(raised),
            rule=raised.rule,
            evidence=evidence,
        )

    def _named_directions(self, evidence: dict[str, Any]) -> dict[str, Any]:
        """The density ratio's coefficients (while the weighted monitor adapts) as its leading
        directions, by feature name."""
        if "density_ratio_coefficients" not in evidence:
            return evidence
        out = dict(evidence)
        out["density_ratio_directions"] = density_ratio_directions(
            out.pop("density_ratio_coefficients"), self.feature_names
        )
        return out

    def _alarm_config(self, detector: str) -> AlarmConfig:
        if detector == "covariate" and self.config.covariate_alarm is not None:
            return self.config.covariate_alarm
        return self.config.alarm

    def _threshold(self, raised: DetectorAlarm) -> float:
        """The threshold in force at the alarm: exactly as configured when it is fixed (the
        detectors work with its logarithm), else as raised (a time budget's rate-following
        threshold, Ville's 1/α_k with lifetime spending)."""
        fixed = self._alarm_config(raised.detector).fixed_threshold
        return raised.threshold if fixed is None else fixed

    def _budget_evidence(self, raised: DetectorAlarm) -> dict[str, Any]:
        """The budget an alarm was raised under: ``budget`` as configured, the detector's
        ``budget_share`` and, for a time budget, its ``min_threshold`` and either the
        ``event_rate`` (updates/s) its threshold followed (threshold / (share × budget seconds))
        or ``at_min_threshold`` when the floor set the threshold."""
        alarm = self._alarm_config(raised.detector)
        if alarm.events is not None:
            return {"budget": f"{alarm.events} events", "budget_share": BUDGET_SHARE}
        seconds, floor = alarm.budget_seconds, alarm.min_threshold
        if seconds is None or floor is None:
            return {}
        evidence: dict[str, Any] = {
            "budget": format_duration(seconds),
            "budget_seconds": seconds,
            "budget_share": BUDGET_SHARE,
            "min_threshold": floor,
        }
        threshold = self._threshold(raised)
        if threshold > floor:
            evidence["event_rate"] = threshold / (BUDGET_SHARE * seconds)
        else:  # the rate was at most floor / (share · T): the floor set the threshold
            evidence["at_min_threshold"] = True
        return evidence

    def _window_record(self, decision: Any, ts: datetime) -> OODWindow:
        record = OODWindow(
            stream=self.name,
            window_index=self.window_index,
            start_index=decision.start_index,
            end_index=decision.end_index,
            ts=ts,
            n=decision.n,
            n_flagged=decision.n_flagged,
            threshold=_finite(decision.threshold),
            rule=decision.rule,
            alpha=decision.alpha,
            flagged_ids=tuple(decision.flagged_ids),
        )
        self.window_index += 1
        return record

    # -- validation ---------------------------------------------------------------------------

    def _feature_list(self, event: PredictionEvent) -> list[float]:
        """The event's features in the stream's order, checked against its width (a list: the
        batch path builds one matrix per batch)."""
        values = event.feature_values(self.calibration.feature_names)
        if len(values) != self.calibration.n_features:
            raise InvalidEvent(
                f"wrong feature dimension: got {len(values)}, "
                f"stream {self.name!r} expects {self.calibration.n_features}"
            )
        return values

    def _ood_lists(
        self, event: PredictionEvent, kinds: tuple[str, ...]
    ) -> dict[str, list[float]]:
        """The event's logits / embedding the OOD rule reads, checked (:meth:`_ood_inputs`)."""
        inputs: dict[str, list[float]] = {}
        for kind in ("logits", "embedding"):
            value = getattr(event, kind)
            expected = getattr(self.calibration, kind)
            if value is None:
                if kind in kinds:
                    raise InvalidEvent(f"'{kind}' is missing; the stream's OOD scorers read it")
                continue
            if expected is None or len(value) != expected.shape[1]:
                width = None if expected is None else expected.shape[1]
                raise InvalidEvent(f"'{kind}' has length {len(value)}, stream expects {width}")
            if kind in kinds:
                inputs[kind] = value
        return inputs

    def _prediction(self, event: PredictionEvent) -> float | tuple[float, ...]:
        n_classes = self.calibration.n_classes
        if n_classes is None:
            if not isinstance(event.prediction, float | int):
                raise InvalidEvent("regression stream expects a number in 'prediction'")
            return float(event.prediction)
        if not isinstance(event.prediction, list) or len(event.prediction) != n_classes:
            raise InvalidEvent(f"'prediction' must be a probability vector of length {n_classes}")
        if min(event.prediction) < 0 or abs(math.fsum(event.prediction) - 1.0) > 1e-3:
            raise InvalidEvent("'prediction' probabilities must be >= 0 and sum to 1")
        return tuple(event.prediction)

    def _scale(self, event: PredictionEvent) -> float | None:
        """The event's predicted scale when the stream's score reads it (else None)."""
        if self.config.conditional_score not in SCALED_RESIDUALS:
            return None
        if event.scale is None:
            raise InvalidEvent(
                f"'scale' is missing; stream {self.name!r} scores residuals with "
                f"{self.config.conditional_score!r}, which divides by it"
            )
        return event.scale

    def _check_label(self, label: Any) -> None:
        n_classes = self.calibration.n_classes
        if n_classes is None:
            if isinstance(label, str | bool):
                raise InvalidEvent("regression stream expects a numeric 'label'")
        elif not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < n_classes:
            raise InvalidEvent(f"'label' must be a class index in [0, {n_classes})")

    # -- state --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume exactly: detectors, OOD window, label store, counters."""
        return {
            "version": STATE_VERSION,
            "event_index": self.event_index,
            "labeled": self.labeled,
            "window_index": self.window_index,
            "last_ts": None if self.last_ts is None else self.last_ts.isoformat(),
            "detectors": self.detectors.state_dict(),
            "ood": None if self.ood is None else self.ood.state_dict(),
            "join": self.join.state_dict(),
            "config_version": self.config_version,
            "version_since": self.version_since,
            "unrevised": [a.to_json() for a in self._unrevised.values()],
            "performance": self.performance.state_dict(),
            # with the calibration while an alarm may still open a window: a configuration
            # update replaces the calibration, and the window must test against this one
            "attribution": self.attribution.state_dict(keep_reference=bool(self._unrevised)),
            "attributed": [[done.alarm_id, done.attribution, ts.isoformat()]
                           for done, ts in self._attributed],
            **self._carried_state(),
        }

    def _carried_state(self) -> dict[str, Any]:
        """What a configuration update carried over or closed and is not done with yet (no key
        when there is none: the state of a stream never updated is as before)."""
        state: dict[str, Any] = {}
        if self._retired:
            state["retired"] = [r.state_dict() for r in self._retired]
        if self._closed:
            state["closed"] = [a.to_json() for a in self._closed]
        if self._unattributed:
            state["unattributed"] = [e.to_json() for e in self._unattributed]
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` output.

        A state written under another configuration version (the stream was updated) gives its
        counters and its label store: the detectors and the OOD rule start afresh from this
        version's calibration at the state's event index (:attr:`version_since`), so event
        indexes and alarm ids go on without repeating. Its alarms waiting for a revision and
        its open attribution windows are carried over (:meth:`_carry_over`).
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported stream state version {state.get('version')!r}")
        if int(state.get("config_version", 1)) == self.config_version:
            self._check_feature_order(state)
        self.event_index = state["event_index"]
        self.labeled = state["labeled"]
        self.window_index = state["window_index"]
        self.last_ts = (
            None if state["last_ts"] is None else datetime.fromisoformat(state["last_ts"])
        )
        self.join.load_state(state["join"])
        self._load_explanations(state)
        self._closed = [Alarm.from_json(a) for a in state.get("closed", [])]
        self._unattributed = [_evidence_of(e) for e in state.get("unattributed", [])]
        if int(state.get("config_version", 1)) != self.config_version:
            self.version_since = self.event_index
            self._close_old_ood(state.get("ood"))
            self._carry_over(state)
            return
        self.version_since = int(state.get("version_since", 0))
        self.detectors = type(self.detectors).from_state(state["detectors"])
        self._unrevised = {a["id"]: Alarm.from_json(a) for a in state.get("unrevised", [])}
        self._retired = [_Retired.load(r) for r in state.get("retired", [])]
        if self.ood is not None and state["ood"] is not None:
            self.ood = type(self.ood).from_state(state["ood"])

    def _close_old_ood(self, state: dict[str, Any] | None) -> None:
        """At a configuration update: close the old version's partial OOD window (decided by
        its own rule over the events it holds, stored at the time of the last event before the
        update) and number this version's OOD events from the stream's event index, so that
        windows go on without gap or overlap (docs/operations.md, "Configuration updates")."""
        if state is not None:
            old = OODDecider.from_state(state)
            decisions = old.windows()
            last = old.flush()
            at = self.last_ts or _EPOCH
            self._windows += [self._window_record(d, at) for d in
                              [*decisions, *([] if last is None else [last])]]
        if self.ood is not None:
            self.ood.start_at(self.event_index)

    def _check_feature_order(self, state: dict[str, Any]) -> None:
        """Refuse (before anything is loaded) a state of this version taken with the features
        in another order: its detectors would read the new events' columns permuted."""
        attribution = state.get("attribution")
        taken = None if attribution is None else tuple(attribution["feature_names"])
        if taken is None or taken == self.feature_names:
            return
        raise FeatureOrderError(
            f"stream {self.name!r}: its checkpoint was taken with the features in the order "
            f"({', '.join(taken)}), its configuration version {self.config_version} reads "
            f"({', '.join(self.feature_names)}); the stream is stopped rather than run with its "
            "features permuted. Fix: `monitor db upgrade` recovers a stored order from the "
            "checkpoint; for other features store a new version (`monitor streams update "
            "CONFIG.yaml`), then replay the stream's dead letters"
        )

    def _carry_over(self, state: dict[str, Any]) -> None:
        """After a configuration update (``state`` written under another version): the alarms
        still waiting as ``insufficient_evidence`` are revised by the detectors they were raised
        by, kept for that only (``_Retired``: their support flags go on over the new events, no
        test, no alarm), and the open attribution windows complete against the calibration
        and at the length of the version that opened them. Both need the same features (names,
        in order): with others, the new events cannot be read as the old detectors read them,
        and each such alarm is closed at once with an explicit outcome instead (a last
        revision, still ``insufficient_evidence``, naming why; an ``attribution_not_completed``
        evidence in place of the attribution). Nothing is dropped silently."""
        unrevised = {a["id"]: Alarm.from_json(a) for a in state.get("unrevised", [])}
        attribution = state.get("attribution")
        version = int(state.get("config_version", 1))
        # The predictions still waiting for their label were made under that version: their
        # labels join only if this version reads the same features (_check_made_under).
        self.join.mark_made_under(
            version, None if attribution is None else tuple(attribution["feature_names"])
        )
        same = attribution is not None and \
            tuple(attribution["feature_names"]) == self.feature_names
        retired = [_Retired.load(r) for r in state.get("retired", [])]
        detectors = type(self.detectors).from_state(state["detectors"])
        if detectors.pending and attribution is not None:
            reference = attribution.get("reference")
            retired.append(_Retired(
                version, detectors,
                None if reference is None else np.asarray(reference, np.float64),
                int(attribution["window"]),
            ))
        self._retired = retired if same and unrevised else []
        waiting = {alarm_id(self.name, a.detector, a.event_index)
                   for r in self._retired for a in r.detectors.pending}
        self._unrevised = {k: a for k, a in unrevised.items() if k in waiting}
        why = self._why_not_carried(attribution, same)
        at = self.last_ts
        self._closed += [
            dataclasses.replace(alarm, evidence=_json_safe({
                **alarm.evidence, "closed_by_config_version": self.config_version,
                "closed_reason": why,
            }), revision=alarm.revision + 1, revised_at=at)
            for key, alarm in unrevised.items() if key not in waiting
        ]
        self.attribution.close()  # a reused monitor: only the state's windows
        if attribution is None:
            return
        dropped = self.attribution.adopt(attribution)
        self._unattributed += [
            AlarmEvidence(self.name, w["alarm_id"], {"attribution_not_completed": {
                "closed_by_config_version": self.config_version, "reason": why,
                "window": w["window"],
            }}, at)
            for w in dropped
        ]

    def _why_not_carried(self, attribution: dict[str, Any] | None, same: bool) -> str:
        if attribution is None:
            return (f"configuration version {self.config_version} replaced a state that does "
                    "not name its features")
        if same:  # a state in which the alarm waits but no detector's evidence does
            return (f"configuration version {self.config_version} replaced a state that "
                    "holds no evidence window of this alarm")
        return (f"configuration version {self.config_version} monitors other features "
                f"({', '.join(self.feature_names)}; before: "
                f"{', '.join(attribution['feature_names'])})")


    def _load_explanations(self, state: dict[str, Any]) -> None:
        """Performance windows and attributions of a state (absent in states written before
        they existed). Under another configuration version only the window counter is kept
        (window numbers go on without repeating); open windows start afresh."""
        self._attributed = [
            (CompletedAttribution(a, e), datetime.fromisoformat(rest[0]) if rest else _EPOCH)
            for a, e, *rest in state.get("attributed", [])
        ]
        performance = state.get("performance")
        if performance is None:
            return
        if int(state.get("config_version", 1)) != self.config_version:
            self.performance.window_index = int(performance["window_index"])
            return  # the attribution windows: _carry_over
        self.performance = PerformanceWindows.from_state(performance)
        self.attribution.load_state(state["attribution"])


@dataclass(slots=True)
class _Batch:
    """A stream's share of a poll batch laid out for the batch calls: the valid predictions
    (``cov_*``, in arrival order) and the labelled events (``cond_*``, in the order their labels
    joined; ``cond_before[j]``: predictions of the batch that came before). ``*_seq`` numbers
    both kinds of update in arrival order, to keep the records in the per-event order."""

    cov_rows: list[list[float]] = field(default_factory=list)
    cov_index: list[int] = field(default_factory=list)
    cov_ts: list[datetime] = field(default_factory=list)
    cov_ids: list[str] = field(default_factory=list)
    cov_seq: list[int] = field(default_factory=list)
    ood_rows: dict[str, list[list[float]]] = field(default_factory=dict)
    cond_rows: list[tuple[float, ...]] = field(default_factory=list)
    cond_scores: list[float] = field(default_factory=list)
    cond_index: list[int] = field(default_factory=list)
    cond_ts: list[datetime] = field(default_factory=list)
    cond_ids: list[str] = field(default_factory=list)
    cond_seq: list[int] = field(default_factory=list)
    cond_before: list[int] = field(default_factory=list)
    cond_predictions: list[Any] = field(default_factory=list)
    cond_labels: list[Any] = field(default_factory=list)
    seq: int = 0

    def add_prediction(
        self, event_id: str, index: int, ts: datetime, features: list[float],
        inputs: dict[str, list[float]],
    ) -> None:
        self.cov_rows.append(features)
        self.cov_index.append(index)
        self.cov_ts.append(ts)
        self.cov_ids.append(event_id)
        self.cov_seq.append(self.seq)
        self.seq += 1
        for kind, value in inputs.items():
            self.ood_rows.setdefault(kind, []).append(value)

    def add_joined(self, joined: Joined, config: StreamConfig) -> None:
        pending = joined.pending
        self.cond_rows.append(pending.features)
        self.cond_scores.append(
            conditional_score(config, pending.prediction, joined.label, pending.scale)
        )
        self.cond_index.append(pending.event_index)
        self.cond_ts.append(datetime.fromtimestamp(pending.ts, UTC))  # the prediction's time
        self.cond_ids.append(pending.event_id)
        self.cond_seq.append(self.seq)
        self.cond_before.append(len(self.cov_index))
        self.cond_predictions.append(pending.prediction)
        self.cond_labels.append(joined.label)
        self.seq += 1


def _check_calibration(config: StreamConfig, calibration: Calibration) -> None:
    if config.task == "classification" and calibration.n_classes is None:
        raise CalibrationError("classification calibration needs probability-vector predictions")
    if config.task == "regression" and calibration.n_classes is not None:
        raise CalibrationError("regression calibration needs numeric predictions")
    if config.conditional_score in SCALED_RESIDUALS and calibration.scales is None:
        raise CalibrationError(
            f"score {config.conditional_score!r} needs a 'scale' on every calibration row"
        )


#: The completion time of an attribution restored from a state written before it was kept.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: What a detector's revision adds to its alarm's evidence (:meth:`StreamDetectors._revise`).
_REVISION_KEYS = ("outside_support_fraction", "evidence_events", "evidence_until")


@dataclass(slots=True)
class _Retired:
    """The detectors of an earlier configuration version, kept until their pending alarms are
    revised (:meth:`StreamMonitor._carry_over`), with what a window opened by such a revision
    needs: that version's sorted calibration rows (None in a state written before they were
    kept: the current calibration's) and window length."""

    version: int
    detectors: StreamDetectors
    reference: np.ndarray | None
    size: int

    @property
    def window(self) -> tuple[np.ndarray | None, int]:
        return self.reference, self.size

    def state_dict(self) -> dict[str, Any]:
        return {"config_version": self.version, "detectors": self.detectors.state_dict(),
                "reference": self.reference, "window": self.size}

    @classmethod
    def load(cls, state: dict[str, Any]) -> _Retired:
        reference = state.get("reference")
        return cls(int(state["config_version"]), StreamDetectors.from_state(state["detectors"]),
                   None if reference is None else np.asarray(reference, np.float64),
                   int(state["window"]))


def _listed(names: Sequence[str], most: int = 12) -> str:
    """Feature names for a message, the middle left out when there are many.

    >>> _listed(("a", "b"))
    'a, b'
    >>> _listed([f"x{j}" for j in range(30)], most=4)
    'x0, x1, …, x29 (30 features)'
    """
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[: most - 2])}, …, {names[-1]} ({len(names)} features)"


def _evidence_of(data: dict[str, Any]) -> AlarmEvidence:
    ts = data.get("ts")
    return AlarmEvidence(data["stream"], data["alarm_id"], data["evidence"],
                         None if ts is None else datetime.fromisoformat(ts))


def _needs_attribution(alarm: Alarm) -> bool:
    """Covariate alarms and extreme-covariate-shift alarms get a feature attribution."""
    return alarm.detector == "covariate" or alarm.kind == "extreme_covariate_shift"


def _opens_attribution(alarm: Alarm) -> bool:
    """Whether this record of an alarm opens its attribution window (the predictions after the
    prediction or label that produced the record): an alarm as raised, when it needs one; a
    revision, when it makes the alarm need one. A detector revises only alarms raised as
    ``insufficient_evidence``, which need one only when covariate (their window opened when
    they were raised): so a revised conditional alarm opens its window when its revision
    makes it an ``extreme_covariate_shift`` (docs/explain.md)."""
    if not _needs_attribution(alarm):
        return False
    return alarm.revision == 1 or alarm.detector != "covariate"


def _finite(value: float) -> float:
    """Trace values must be finite for storage and JSON; clip infinities, keep nan as nan (the
    one ``math.nan`` object, as the per-event path gives: records then compare equal with ==)."""
    if math.isnan(value):
        return math.nan
    return max(-1e300, min(1e300, float(value)))


def _json_safe(evidence: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in evidence.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None if math.isnan(value) else _finite(value)
        out[key] = value
    return out
