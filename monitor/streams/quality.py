"""Data quality and schema changes of one stream (docs/tabular.md).

:class:`StreamQuality` sits beside the stream's two monitors. It feeds each prediction event's
data-quality indicators (a feature missing, an unseen category, a value outside the calibration
range: :attr:`FeatureSchema.indicators <monitor.streams.schema.FeatureSchema.indicators>`) to a
:class:`~monitor.core.quality.DataQualityMonitor` with a false-alarm budget of its own
(``data_quality.false_alarm_every``; the covariate and conditional monitors' thresholds do not
move), and watches the events' keys against the schema: a key the calibration never had, or a
feature of the schema left out of :data:`ABSENT_AFTER` consecutive events, raises one
``schema_change`` alarm (detector ``schema``) per key, not one per event. Its state
round-trips through :meth:`StreamQuality.state_dict`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from monitor.core.martingales.alarms.budget import EventRateThreshold
from monitor.core.quality import DataQualityMonitor, QualityAlarm
from monitor.streams.config import DEFAULT_THRESHOLD, StreamConfig
from monitor.streams.records import Alarm, finite
from monitor.streams.schema import FeatureSchema

__all__ = ["ABSENT_AFTER", "StreamQuality"]

#: Consecutive events that leave a feature of the schema out before a ``schema_change`` alarm
#: (``absent_feature``); a feature that comes back re-arms it.
ABSENT_AFTER = 100

#: Version of :meth:`StreamQuality.state_dict`.
STATE_FORMAT = 1


class StreamQuality:
    """Data-quality indicators and schema changes of one stream's prediction events.

    Parameters
    ----------
    name
        The stream.
    config
        Its configuration: ``data_quality`` (enabled, ``rates``, ``false_alarm_every``) and the
        alarm rule (``alarm.rule``; a ``ville`` stream tests data quality at ``alarm.alpha``).
    schema
        The calibration's feature schema: the indicators and their reference counts.
    config_version
        Named in each alarm's evidence.
    """

    def __init__(self, name: str, config: StreamConfig, schema: FeatureSchema,
                 config_version: int = 1) -> None:
        self.name = name
        self.config_version = config_version
        dq = config.data_quality
        chosen = [j for j, (_, rate) in enumerate(schema.indicators) if rate in dq.rates]
        #: Columns of ``FeatureRow.quality`` the monitor reads.
        self.columns = np.asarray(chosen, np.intp)
        self.indicators = tuple(schema.indicators[j] for j in chosen)
        rule = config.alarm.rule
        self.budget: EventRateThreshold | None = None
        self.monitor: DataQualityMonitor | None = None
        if dq.enabled and chosen:
            reference = [schema.quality_reference[j] for j in chosen]
            threshold = DEFAULT_THRESHOLD
            if rule != "ville":
                floor = config.alarm.min_threshold or DEFAULT_THRESHOLD
                self.budget = EventRateThreshold(dq.false_alarm_every, share=1, floor=floor)
                threshold = self.budget.threshold
            self.monitor = DataQualityMonitor(
                self.indicators, [q.n for q in reference], [q.ones for q in reference],
                rule=rule, threshold=threshold, alpha=config.alarm.alpha,
                rebaseline=config.rebaseline,
            )
        #: Stream event index of the data-quality monitor's first update.
        self.start = 0
        #: Keys the calibration never had, each with the event index it first came.
        self.new_keys: dict[str, int] = {}
        #: Per feature of the schema: the consecutive events (up to now) that left it out.
        self.absent_run: dict[str, int] = {}
        #: Features whose absence raised an alarm (re-armed when the feature comes back).
        self.absent_alarmed: set[str] = set()

    # -- updates --------------------------------------------------------------------------------

    def update(
        self,
        quality: np.ndarray,
        index: Sequence[int],
        ids: Sequence[str],
        ts: Sequence[datetime],
        keys: Sequence[tuple[int, tuple[str, ...], tuple[str, ...]]],
        seconds: Sequence[float] | None = None,
    ) -> list[tuple[int, Alarm]]:
        """One batch of prediction events: ``quality`` their (n, k) indicators in the order of
        the schema's, ``index``/``ids``/``ts`` their stream event indexes, ids and times
        (``seconds``: the times as epoch seconds, if the caller has them already),
        ``keys`` the ``(position, unknown keys, absent features)`` of the events that had any.
        Returns ``(batch position, alarm)`` pairs in order."""
        alarms = self._schema_alarms(len(index), index, ids, ts, keys)
        if self.monitor is not None and len(index):
            alarms += self._quality_alarms(quality, index, ids, ts, seconds)
        alarms.sort(key=lambda item: item[0])
        return alarms

    def _quality_alarms(
        self, quality: np.ndarray, index: Sequence[int], ids: Sequence[str],
        ts: Sequence[datetime], seconds: Sequence[float] | None,
    ) -> list[tuple[int, Alarm]]:
        assert self.monitor is not None
        rule = self.monitor.rule
        if self.monitor.n_seen == 0:
            self.start = index[0]
        thresholds = None
        if self.budget is not None:
            thresholds = self.budget.thresholds(
                [t.timestamp() for t in ts] if seconds is None else seconds)
        raised: list[tuple[int, QualityAlarm]] = []
        self.monitor.update_batch(
            quality[:, self.columns], thresholds, lambda i, alarm: raised.append((i, alarm))
        )
        # as after the batch's last update one by one: its alarms only (the state keeps them)
        self.monitor._last_alarms = tuple(a for i, a in raised if i == len(index) - 1)
        return [(i, self._quality_record(alarm, rule, index[i], ids[i], ts[i]))
                for i, alarm in raised]

    def _quality_record(self, alarm: QualityAlarm, rule: str, index: int, event_id: str,
                        ts: datetime) -> Alarm:
        event = alarm.event
        shift = index - event.index  # the monitor's update count to the stream's event index
        indicators = [
            {**row, "changepoint_index": int(row["changepoint_index"]) + shift}
            for row in alarm.indicators
        ]
        changepoint = None if event.changepoint is None else event.changepoint + shift
        return Alarm(
            self.name, "data_quality", "data_quality", event_id, index, ts, changepoint,
            finite(math.exp(min(event.log_statistic, 700.0))),
            finite(math.exp(min(event.log_threshold, 700.0))),
            rule,
            {
                "indicators": indicators,
                "changepoint_index": changepoint,
                "events_after": index - (changepoint if changepoint is not None else index) + 1,
                "log_statistic": event.log_statistic,
                "log_threshold": event.log_threshold,
                "bonferroni_over": len(self.indicators),
                "config_version": self.config_version,
            },
        )

    def _schema_alarms(
        self, n: int, index: Sequence[int], ids: Sequence[str], ts: Sequence[datetime],
        keys: Sequence[tuple[int, tuple[str, ...], tuple[str, ...]]],
    ) -> list[tuple[int, Alarm]]:
        out: list[tuple[int, Alarm]] = []
        previous = -1
        for position, unknown, absent in keys:
            if position > previous + 1:  # events between said nothing absent
                self._present_all()
            previous = position
            changes = [("new_key", key, index[position], 1)
                       for key in unknown if key not in self.new_keys]
            for key in unknown:
                self.new_keys.setdefault(key, index[position])
            for feature in list(self.absent_run):
                if feature not in absent:
                    self._present(feature)
            for feature in absent:
                run = self.absent_run.get(feature, 0) + 1
                self.absent_run[feature] = run
                if run >= ABSENT_AFTER and feature not in self.absent_alarmed:
                    self.absent_alarmed.add(feature)
                    changes.append(("absent_feature", feature, index[position] - run + 1, run))
            if changes:
                out.append((position, self._schema_record(
                    changes, index[position], ids[position], ts[position])))
        if n and previous < n - 1:
            self._present_all()
        return out

    def _present(self, feature: str) -> None:
        self.absent_run.pop(feature, None)
        self.absent_alarmed.discard(feature)

    def _present_all(self) -> None:
        self.absent_run.clear()
        self.absent_alarmed.clear()

    def _schema_record(self, changes: list[tuple[str, str, int, int]], index: int,
                       event_id: str, ts: datetime) -> Alarm:
        change, key, first, events = changes[0]
        return Alarm(
            self.name, "schema", "schema_change", event_id, index, ts, first,
            float(events), float(ABSENT_AFTER if change == "absent_feature" else 1), "events",
            {
                "change": change, "key": key, "first_event_index": first, "events": events,
                "changes": [{"change": c, "key": k, "first_event_index": f, "events": e}
                            for c, k, f, e in changes],
                "config_version": self.config_version,
            },
        )

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state; :meth:`load_state` continues exactly."""
        return {
            "format": STATE_FORMAT,
            "start": self.start,
            "monitor": None if self.monitor is None else self.monitor.state_dict(),
            "budget": None if self.budget is None else self.budget.state_dict(),
            "new_keys": dict(self.new_keys),
            "absent_run": dict(self.absent_run),
            "absent_alarmed": sorted(self.absent_alarmed),
        }

    def load_state(self, state: dict[str, Any] | None) -> None:
        """Continue from :meth:`state_dict`'s output; ``None`` (a checkpoint from before data
        quality was monitored) starts afresh."""
        if state is None:
            return
        self.start = int(state["start"])
        if self.monitor is not None and state["monitor"] is not None:
            self.monitor = DataQualityMonitor.from_state(state["monitor"])
        if self.budget is not None and state["budget"] is not None:
            self.budget = EventRateThreshold.from_state(state["budget"])
        self.new_keys = {str(k): int(v) for k, v in state["new_keys"].items()}
        self.absent_run = {str(k): int(v) for k, v in state["absent_run"].items()}
        self.absent_alarmed = set(state["absent_alarmed"])
