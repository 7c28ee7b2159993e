"""The records :class:`monitor.streams.monitor.StreamMonitor` stores, built from what its
detectors and OOD rule raised: alarms (with their budget and named directions), their revisions,
trace points and OOD windows, all JSON-safe.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from typing import Any

import numpy as np

from monitor.core.diagnosis import INSUFFICIENT_EVIDENCE
from monitor.streams.attribution import density_ratio_directions
from monitor.streams.config import BUDGET_SHARE, AlarmConfig
from monitor.streams.detectors import BatchResult, DetectorAlarm, StreamDetectors
from monitor.streams.durations import format_duration
from monitor.streams.monitor_inputs import ConfiguredStream
from monitor.streams.records import Alarm, OODWindow, TracePoint, alarm_id

__all__ = ["AlarmRecords", "finite", "json_safe", "opens_attribution"]

#: What a detector's revision adds to its alarm's evidence
#: (:meth:`monitor.streams.detector_diagnosis.AlarmDiagnosis._revise`).
_REVISION_KEYS = ("outside_support_fraction", "evidence_events", "evidence_until")


class AlarmRecords(ConfiguredStream):
    """The record builders of :class:`monitor.streams.monitor.StreamMonitor` (a mixin)."""

    detectors: StreamDetectors
    window_index: int
    #: Alarms raised as ``insufficient_evidence``, by id, until their revision.
    _unrevised: dict[str, Alarm]

    def _traced(
        self, detector: str, result: BatchResult, i: int, index: int, ts: datetime
    ) -> TracePoint:
        """The trace point of a detector's update i of a batch (its values from the trace)."""
        covariate = detector == "covariate"
        trace = result.cov_trace if covariate else result.cond_trace
        thresholds = result.cov_thresholds if covariate else result.cond_thresholds
        ess = None if covariate else finite(float(trace.weights_ess[i]))  # type: ignore[index]
        monitor = self.detectors.covariate if covariate else self.detectors.conditional
        threshold = monitor.threshold if thresholds is None else float(thresholds[i])
        return TracePoint(
            stream=self.name,
            detector=detector,
            event_index=index,
            ts=ts,
            log_martingale=finite(float(trace.log_martingale[i])),
            p_value=finite(float(trace.p_value[i])),
            log_statistic=finite(float(trace.log_statistic[i])),
            log_threshold=finite(math.log(threshold)),
            weights_ess=ess,
            config_version=self.config_version,
        )

    def _alarm_record(
        self, raised: DetectorAlarm, event_id: str, index: int, ts: datetime
    ) -> Alarm:
        """The record of an alarm raised at event ``index`` or, for a revision, of the alarm it
        revises, revised at ``ts`` (the event that completed its evidence)."""
        evidence = json_safe({
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
        evidence = json_safe({
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
        schema = self.calibration.schema
        names = self.feature_names if schema.is_plain else schema.encoded_features
        directions = density_ratio_directions(out.pop("density_ratio_coefficients"), names)
        if not schema.is_plain:  # one per original column: its embedding column of largest |β|
            first: dict[str, dict[str, Any]] = {}
            for direction in directions:
                first.setdefault(direction["feature"], direction)
            directions = list(first.values())
        out["density_ratio_directions"] = directions
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
        ``budget_share`` and, for a time budget, its ``min_threshold``, its ``budget_events``
        (the event-count part) and either the ``event_rate`` (updates/s) its threshold followed
        (threshold / (share × budget seconds)), ``at_events_threshold`` when the event-count
        threshold was in force (warm-up, an event without ``ts``) or ``at_min_threshold`` when
        the floor set the threshold."""
        alarm = self._alarm_config(raised.detector)
        seconds, floor, events = alarm.budget_seconds, alarm.min_threshold, alarm.events
        if seconds is None and events is not None:
            return {"budget": f"{events} events", "budget_share": BUDGET_SHARE}
        if seconds is None or floor is None or events is None:
            return {}
        evidence: dict[str, Any] = {
            "budget": format_duration(seconds),
            "budget_seconds": seconds,
            "budget_share": BUDGET_SHARE,
            "min_threshold": floor,
            "budget_events": events,
        }
        threshold = self._threshold(raised)
        if threshold == alarm.event_threshold and threshold > floor:
            evidence["at_events_threshold"] = True
        elif threshold > floor:
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
            threshold=finite(decision.threshold),
            rule=decision.rule,
            alpha=decision.alpha,
            flagged_ids=tuple(decision.flagged_ids),
        )
        self.window_index += 1
        return record


def _needs_attribution(alarm: Alarm) -> bool:
    """Covariate alarms and extreme-covariate-shift alarms get a feature attribution."""
    return alarm.detector == "covariate" or alarm.kind == "extreme_covariate_shift"


def opens_attribution(alarm: Alarm) -> bool:
    """Whether this record of an alarm opens its attribution window (the predictions after the
    prediction or label that produced the record): an alarm as raised, when it needs one; a
    revision, when it makes the alarm need one. A detector revises only alarms raised as
    ``insufficient_evidence``, which need one only when covariate (their window opened when
    they were raised): so a revised conditional alarm opens its window when its revision
    makes it an ``extreme_covariate_shift`` (docs/explain.md)."""
    if not _needs_attribution(alarm):
        return False
    return alarm.revision == 1 or alarm.detector != "covariate"


def finite(value: float) -> float:
    """Trace values must be finite for storage and JSON; clip infinities, keep nan as nan (the
    one ``math.nan`` object, as the per-event path gives: records then compare equal with ==)."""
    if math.isnan(value):
        return math.nan
    return max(-1e300, min(1e300, float(value)))


def json_safe(evidence: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in evidence.items():
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None if math.isnan(value) else finite(value)
        out[key] = value
    return out
