"""How :class:`monitor.streams.detectors.StreamDetectors` diagnoses an alarm: its kind from the
support and penalised flags of its evidence window (:mod:`monitor.core.diagnosis`), its record
(:class:`DetectorAlarm`), and its revision once an ``insufficient_evidence`` window completes.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from monitor.core.detectors import AlarmEvent, ConditionalMonitor, CovariateMonitor
from monitor.core.detectors.base import FloatArray, window_mean
from monitor.core.diagnosis import (
    INSUFFICIENT_EVIDENCE,
    MIN_RECENT,
    RECENT,
    diagnose_conditional,
    diagnose_covariate,
)
from monitor.core.martingales.alarms import EventRateThreshold

__all__ = ["AlarmDiagnosis", "DetectorAlarm"]


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
class PendingAlarm:
    """An alarm raised with too little evidence: its window [start, end] of the detector's
    updates is complete after update ``end`` (``start`` + ``min_events`` - 1)."""

    alarm: DetectorAlarm
    start: int
    end: int

    def to_json(self) -> dict[str, Any]:
        return {"alarm": self.alarm.to_json(), "start": self.start, "end": self.end}

    @classmethod
    def load(cls, state: dict[str, Any]) -> PendingAlarm:
        return cls(DetectorAlarm(**state["alarm"]), int(state["start"]), int(state["end"]))


@dataclass(frozen=True, slots=True)
class ConditionalView:
    """What an alarm's evidence reads of the conditional monitor, as it was at the alarm."""

    penalised_fraction: float
    weights_ess: float
    adapting: bool
    density_ratio_coefficients: FloatArray | None = None


class EventIndex:
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
    def load(cls, state: dict[str, Any]) -> EventIndex:
        obj = cls(int(state["size"]))
        obj.indices.extend(int(i) for i in np.asarray(state["indices"]).tolist())
        obj.n = int(state["n"])
        return obj



class AlarmDiagnosis:
    """The diagnosis half of :class:`monitor.streams.detectors.StreamDetectors` (a mixin: the
    attributes below are set by its constructor)."""

    covariate: CovariateMonitor
    conditional: ConditionalMonitor
    outside_level: float
    penalised_level: float
    budgets: dict[str, EventRateThreshold]
    min_events: int
    _pending: list[PendingAlarm]
    _cov_events: EventIndex
    _cond_events: EventIndex
    _cond_outside: collections.deque[bool]
    _cond_penalised: collections.deque[bool]

    def _covariate_alarm(self, event: AlarmEvent) -> DetectorAlarm:
        outside = evidence_share(self.covariate.outside_fraction, event)
        kind = diagnose_covariate(outside, self.outside_level)
        evidence = self._evidence(event, capped_exp(event.log_statistic), self.conditional)
        evidence["outside_support_fraction"] = outside
        return self._record("covariate", kind, event, self._cov_events, evidence)

    def _conditional_alarm(
        self,
        event: AlarmEvent,
        covariate_statistic: float | None = None,
        view: ConditionalView | ConditionalMonitor | None = None,
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
        outside = evidence_share(outside_in, event)
        penalised = evidence_share(penalised_in, event)
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
        cond: ConditionalView | ConditionalMonitor,
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
        index: EventIndex,
        evidence: dict[str, Any],
        threshold: float | None = None,
    ) -> DetectorAlarm:
        """``threshold``: a time budget's threshold at the alarm (the batch path's), exactly;
        else the monitor's (its rule's threshold under a budget, which is then still the one
        of the alarm's update) or exp(log threshold)."""
        monitor = self.covariate if detector == "covariate" else self.conditional
        if threshold is None:
            budgeted = detector in self.budgets
            threshold = monitor.threshold if budgeted else capped_exp(event.log_threshold)
        start = event.index if event.changepoint is None else event.changepoint
        evidence["evidence_events"] = event.index - start + 1
        insufficient = event.index - start + 1 < self.min_events
        alarm = DetectorAlarm(
            detector=detector,
            kind=INSUFFICIENT_EVIDENCE if insufficient else kind,
            event_index=int(index.lookup(event.index) or 0),
            changepoint=index.lookup(event.changepoint),
            statistic=capped_exp(event.log_statistic),
            threshold=threshold,
            rule=monitor.rule,
            evidence=evidence,
        )
        if insufficient:
            self._pending.append(PendingAlarm(alarm, start, start + self.min_events - 1))
        return alarm

    def _revisions(self, detector: str, n: int) -> list[tuple[int, DetectorAlarm]]:
        """The pending alarms of ``detector`` whose evidence its first ``n`` updates complete,
        revised, with the update that completed each (in the order they were raised)."""
        done = [p for p in self._pending if p.alarm.detector == detector and p.end < n]
        if not done:
            return []
        self._pending = [p for p in self._pending if p not in done]
        return [(p.end, self._revise(p)) for p in done]

    def _revise(self, pending: PendingAlarm) -> DetectorAlarm:
        """The kind decided over the completed window (:mod:`monitor.core.diagnosis`, "Evidence
        needed"): the shares of :func:`evidence_share` as if the alarm had been raised at the
        window's last update with the same changepoint."""
        window = AlarmEvent(pending.end, pending.start, 0.0, 0.0, 0.0)
        alarm = pending.alarm
        if alarm.detector == "covariate":
            outside = evidence_share(self.covariate.outside_fraction, window)
            kind = diagnose_covariate(outside, self.outside_level)
            index = self._cov_events
        else:
            n = self._cond_events.n
            outside = evidence_share(
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


def evidence_share(share: Callable[[int, int], float], event: AlarmEvent) -> float:
    """The largest share of flagged events since the alarm's changepoint or in a trailing
    window of MIN_RECENT..RECENT events up to the alarm (nan only when no flag is kept)."""
    start = event.index if event.changepoint is None else event.changepoint
    starts = [start, *(event.index - k + 1 for k in range(MIN_RECENT, RECENT + 1))]
    kept = [v for v in (share(a, event.index) for a in starts) if not math.isnan(v)]
    return max(kept) if kept else math.nan


def capped_exp(log_value: float) -> float:
    return math.exp(min(log_value, math.log(1e300)))

