"""The state of :class:`monitor.streams.monitor.StreamMonitor` across restarts and configuration
versions: :meth:`~VersionedState.state_dict` / :meth:`~VersionedState.load_state`, the feature
order check, and the carry-over at a configuration update (the alarms still waiting for their
revision, kept with the detectors that raised them; the open attribution windows; the old
version's partial OOD window).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from monitor.core.decisions.decider import OODDecider
from monitor.errors import MonitorError
from monitor.streams.attribution import AlarmAttribution, CompletedAttribution
from monitor.streams.detectors import StreamDetectors
from monitor.streams.join import LabelJoin
from monitor.streams.monitor_records import AlarmRecords, json_safe
from monitor.streams.performance import PerformanceWindows
from monitor.streams.quality import StreamQuality
from monitor.streams.records import Alarm, AlarmEvidence, OODWindow, PerformanceWindow, alarm_id

__all__ = ["STATE_VERSION", "FeatureOrderError", "RetiredDetectors", "VersionedState"]

STATE_VERSION = 1


class FeatureOrderError(MonitorError, ValueError):
    """A stream whose features cannot be read in the order its state or calibration needs (the
    message says which stream, the two orders and the fix): the stream is stopped, never run
    with its feature columns permuted."""


class VersionedState(AlarmRecords):
    """The state of :class:`monitor.streams.monitor.StreamMonitor` (a mixin: the attributes
    below are set by its constructor)."""

    event_index: int
    labeled: int
    version_since: int
    last_ts: datetime | None
    events_without_ts: int
    ood: OODDecider | None
    join: LabelJoin
    performance: PerformanceWindows
    attribution: AlarmAttribution
    quality: StreamQuality
    _windows: list[OODWindow]
    _retired: list[RetiredDetectors]
    _closed: list[Alarm]
    _unattributed: list[AlarmEvidence]
    _performance: list[PerformanceWindow]
    _attributed: list[tuple[CompletedAttribution, datetime]]

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
            # data quality and schema changes (docs/tabular.md); a checkpoint without it, of
            # before, starts them afresh
            "quality": self.quality.state_dict(),
            **self._carried_state(),
        }

    def _carried_state(self) -> dict[str, Any]:
        """What a configuration update carried over or closed and is not done with yet, and the
        count of events without ts (no key when there is none: the state of a stream never
        updated, whose events all had a ts, is as before)."""
        state: dict[str, Any] = {}
        if self.events_without_ts:  # no key without: a checkpoint of before counts 0
            state["events_without_ts"] = self.events_without_ts
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
        self.events_without_ts = int(state.get("events_without_ts", 0))
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
        # A checkpoint of before the limit existed holds none: the configuration's applies from
        # here on (a switch at a load is at a position no score decided: still exactly valid).
        if self.config.max_reference is None:
            self.detectors.covariate.reference_limit = self.config.covariate_reference_limit
        self._unrevised = {a["id"]: Alarm.from_json(a) for a in state.get("unrevised", [])}
        self._retired = [RetiredDetectors.load(r) for r in state.get("retired", [])]
        if self.ood is not None and state["ood"] is not None:
            self.ood = type(self.ood).from_state(state["ood"])
        self.quality.load_state(state.get("quality"))

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
        by, kept for that only (:class:`RetiredDetectors`: their support flags go on over the
        new events, no test, no alarm), and the open attribution windows complete against the
        calibration and at the length of the version that opened them. Both need the same
        features (names, in order): with others, the new events cannot be read as the old
        detectors read them, and each such alarm is closed at once with an explicit outcome
        instead (a last revision, still ``insufficient_evidence``, naming why; an
        ``attribution_not_completed`` evidence in place of the attribution). Nothing is dropped
        silently."""
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
        retired = [RetiredDetectors.load(r) for r in state.get("retired", [])]
        detectors = type(self.detectors).from_state(state["detectors"])
        if detectors.pending and attribution is not None:
            reference = attribution.get("reference")
            retired.append(RetiredDetectors(
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
            dataclasses.replace(alarm, evidence=json_safe({
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


#: The completion time of an attribution restored from a state written before it was kept.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class RetiredDetectors:
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
    def load(cls, state: dict[str, Any]) -> RetiredDetectors:
        reference = state.get("reference")
        return cls(int(state["config_version"]), StreamDetectors.from_state(state["detectors"]),
                   None if reference is None else np.asarray(reference, np.float64),
                   int(state["window"]))


def _evidence_of(data: dict[str, Any]) -> AlarmEvidence:
    ts = data.get("ts")
    return AlarmEvidence(data["stream"], data["alarm_id"], data["evidence"],
                         None if ts is None else datetime.fromisoformat(ts))

