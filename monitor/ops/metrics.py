"""Prometheus metrics read from the database at scrape time.

:class:`DatabaseCollector` holds no counters of its own: every scrape reads the stored results
(checkpoints, alarms, dead letters, trace points, OOD windows, webhook deliveries), so any number
of API replicas report the same values and a restart loses nothing.

Labels are bounded: ``stream`` is a registered stream's name, or ``unknown`` for results of a
stream that is not registered (``monitor run --config``) and dead letters that name no stream;
``source`` is the source *kind* (``file``, ``kafka``, ``http``, ``memory``, else ``unknown``),
never a path or topic. Every series of every registered stream and every known label value is
reported from the first scrape on, at 0 until something happens.

Metric names (labels in braces):

- ``monitor_events_processed_total{stream,kind}``: events folded into the stream's checkpoint,
  by ``kind``: ``prediction``, or ``label`` (labels received, separately or inside a prediction)
- ``monitor_alarms_total{stream,detector,kind}``: alarm diagnoses stored, by the kind each version
  was stored with: an alarm raised as ``insufficient_evidence`` and revised later counts once
  under each of its two kinds (a count by the alarms' current kind would go down at each
  revision, which a Prometheus counter must never do)
- ``monitor_alarms_unacknowledged{stream}``: alarms not yet acknowledged
- ``monitor_dead_letters_total{source,stream}``: records that could not be processed
- ``monitor_ood_windows_total{stream}``: OOD decision windows closed
- ``monitor_ood_flagged_total{stream}``: events flagged out-of-distribution
- ``monitor_label_join_pending_predictions{stream}``: predictions waiting for their label
- ``monitor_label_join_pending_labels{stream}``: labels waiting for their prediction
- ``monitor_label_join_lag_seconds{stream}``: event time from the oldest waiting prediction to
  the stream's latest event
- ``monitor_label_join_expired_total{stream,kind}``: predictions / labels dropped unjoined
- ``monitor_events_without_ts_total{stream}``: events processed without a ``ts`` (their time is
  the broker's or the ingest time; the alarm budget runs them on its event-count threshold)
- ``monitor_log_martingale{stream,detector}``: latest log test-martingale (natural log)
- ``monitor_p_value{stream,detector}``: latest conformal p-value
- ``monitor_log_statistic{stream,detector}``: latest log of the alarm rule's statistic
- ``monitor_log_threshold{stream,detector}``: log of the alarm rule's threshold (latest trace)
- ``monitor_threshold{stream,detector}``: the alarm rule's threshold as configured
  (``threshold``, ``2 × events``, or ``1/alpha`` for ``ville``; detectors ``covariate`` and
  ``conditional``); under a time budget (or lifetime spending) the threshold in force at the
  latest trace point
- ``monitor_alarm_budget_seconds{stream,detector}``: the detector's time budget
  (``false_alarm_every`` in seconds), for detectors that have one
- ``monitor_trace_event_index{stream,detector}``: event index of that latest trace point
- ``monitor_webhook_deliveries_total{result}``: delivery attempts by ``result``: ``success``,
  ``http_error``, ``error`` (no answer) or ``dropped``
- ``monitor_alert_outbox{receiver,status}``: alert deliveries ``pending`` (queued or waiting
  for a retry) and ``dead`` (given up), by receiver *name* (the routing file's, never a URL)
- ``monitor_alert_delivery_attempts_total{receiver,result}``: alert delivery attempts by
  receiver name and ``result`` (``success``, ``http_error``, ``error``)
- ``monitor_database_up``: 1 if the scrape could read the database

The module is over 500 lines on purpose: this docstring is the reference of every series (the
docs point here), and the rest is one collector with the queries and family builders of a
scrape, which read the same bounded label sets and change together.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from monitor.db.models import (
    AlarmRevisionRow,
    AlarmRow,
    AlertOutboxRow,
    CheckpointRow,
    DeadLetterRow,
    OODWindowRow,
    StreamRow,
    TracePointRow,
    WebhookDeliveryRow,
)
from monitor.db.store import load_state
from monitor.streams.records import ALARM_KINDS, DETECTORS, KINDS_OF_DETECTOR
from monitor.streams.state import StateFormatError

__all__ = [
    "SOURCE_KINDS",
    "UNKNOWN",
    "CheckpointStats",
    "DatabaseCollector",
    "configured_thresholds",
    "source_kind",
]

log = logging.getLogger(__name__)

#: The label value of anything outside a bounded set (unregistered streams, other sources).
UNKNOWN = "unknown"
#: Source kinds, the only values of the ``source`` label.
SOURCE_KINDS: tuple[str, ...] = ("file", "kafka", "http", "memory")
#: Detectors with a martingale alarm rule (and so a threshold).
RULE_DETECTORS: tuple[str, ...] = ("covariate", "conditional")
EVENT_KINDS: tuple[str, ...] = ("prediction", "label")
WEBHOOK_RESULTS: tuple[str, ...] = ("success", "http_error", "error", "dropped")
OUTBOX_GAUGES: tuple[str, ...] = ("pending", "dead")
ALERT_RESULTS: tuple[str, ...] = ("success", "http_error", "error")


def source_kind(source: str | None) -> str:
    """The bounded ``source`` label of a stored source name or key.

    Examples
    --------
    >>> source_kind("file:/data/events.jsonl"), source_kind("kafka:events"), source_kind("http")
    ('file', 'kafka', 'http')
    >>> source_kind("s3://bucket/x"), source_kind(None)
    ('unknown', 'unknown')
    """
    kind = (source or "").split(":", 1)[0]
    return kind if kind in SOURCE_KINDS else UNKNOWN


def configured_thresholds(config: dict[str, Any]) -> dict[str, float | None]:
    """The alarm threshold of each detector of a stored stream configuration, exactly as
    configured (``ville``: ``1/alpha``; ``events``: 2 × events), None when it moves (a time
    budget; Ville with lifetime spending).

    Examples
    --------
    >>> configured_thresholds({"alarm": {"rule": "shiryaev_roberts", "threshold": 10000.0},
    ...                        "covariate_alarm": {"rule": "ville", "alpha": 0.01}})
    {'covariate': 100.0, 'conditional': 10000.0}
    >>> configured_thresholds({})  # a one-week budget: the threshold follows the event rate
    {'covariate': None, 'conditional': None}
    >>> configured_thresholds({"alarm": {"false_alarm_every": "30d"},
    ...                        "covariate_alarm": {"events": 1000}})
    {'covariate': 2000.0, 'conditional': None}
    """
    from monitor.streams.config import AlarmConfig

    conditional = AlarmConfig.model_validate(config.get("alarm") or {})
    covariate_raw = config.get("covariate_alarm")
    covariate = conditional if covariate_raw is None else AlarmConfig.model_validate(covariate_raw)

    return {"covariate": covariate.fixed_threshold, "conditional": conditional.fixed_threshold}


def budget_seconds(config: dict[str, Any]) -> dict[str, float]:
    """The time budget (seconds) of each detector of a stored stream configuration that has one.

    Examples
    --------
    >>> budget_seconds({"alarm": {"false_alarm_every": "1d"}})
    {'covariate': 86400.0, 'conditional': 86400.0}
    """
    from monitor.streams.config import AlarmConfig

    conditional = AlarmConfig.model_validate(config.get("alarm") or {})
    covariate_raw = config.get("covariate_alarm")
    covariate = conditional if covariate_raw is None else AlarmConfig.model_validate(covariate_raw)
    pairs = (("covariate", covariate), ("conditional", conditional))
    return {d: rule.budget_seconds for d, rule in pairs if rule.budget_seconds is not None}


def _bounded(name: str | None, registered: set[str]) -> str:
    return name if name is not None and name in registered else UNKNOWN

_TRACE_GAUGES = (
    ("log_martingale", "Latest log test-martingale (natural log) of the detector."),
    ("p_value", "Latest conformal p-value of the detector."),
    ("log_statistic", "Latest log of the detector's alarm-rule statistic."),
    ("log_threshold", "Log of the detector's alarm-rule threshold."),
)


@dataclass(frozen=True, slots=True)
class CheckpointStats:
    """What the metrics read from a stream's checkpoint: the label join's backlog and the count
    of events without ts."""

    pending_predictions: int
    pending_labels: int
    lag_seconds: float
    expired_predictions: int
    expired_labels: int
    #: Labels received: joined, waiting, or expired unjoined.
    labels_received: int = 0
    #: Events processed without a ``ts`` (0 in a checkpoint written before they were counted).
    events_without_ts: int = 0

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> CheckpointStats:
        """From a ``StreamMonitor.state_dict()``.

        Examples
        --------
        >>> join = {"predictions": [["a", 0, 100.0, [1.0], 2.0]], "labels": [],
        ...         "counts": [3, 1, 7]}
        >>> last = "1970-01-01T00:02:30+00:00"
        >>> stats = CheckpointStats.from_state({"join": join, "last_ts": last})
        >>> stats.pending_predictions, stats.lag_seconds, stats.expired_predictions
        (1, 50.0, 3)
        >>> stats.labels_received  # 7 joined + 1 expired
        8
        >>> stats.events_without_ts  # a checkpoint without the count: none
        0
        """
        join = state.get("join") or {}
        predictions = join.get("predictions") or []
        counts = join.get("counts") or [0, 0, 0]
        last = state.get("last_ts")
        lag = 0.0
        if predictions and last:
            oldest = min(float(row[2]) for row in predictions)
            lag = max(0.0, datetime.fromisoformat(last).timestamp() - oldest)
        pending_labels = len(join.get("labels") or [])
        received = int(counts[2]) + pending_labels + int(counts[1]) if len(counts) > 2 else 0
        return cls(
            len(predictions), pending_labels, lag, int(counts[0]), int(counts[1]), received,
            int(state.get("events_without_ts", 0)),
        )


class DatabaseCollector(Collector):
    """Collects the service's metrics from the database on every scrape.

    Parameters
    ----------
    sessions
        Session factory of the service's database.

    Examples
    --------
    >>> from prometheus_client import CollectorRegistry, generate_latest
    >>> from monitor.db.engine import make_engine, session_factory
    >>> from monitor.db.migrate import upgrade
    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> url = f"sqlite:///{folder.name}/m.db"
    >>> upgrade(url)
    >>> engine = make_engine(url)
    >>> registry = CollectorRegistry()
    >>> registry.register(DatabaseCollector(session_factory(engine)))
    >>> b"monitor_database_up 1.0" in generate_latest(registry)
    True
    >>> engine.dispose(); folder.cleanup()
    """

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions
        self._join_cache: dict[str, tuple[tuple[int, datetime], CheckpointStats]] = {}

    def describe(self) -> Iterable[Metric]:
        # Empty: the registry must not call collect() (a database read) at registration.
        return []

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("monitor_database_up", "1 if the scrape could read the database.")
        try:
            with self.sessions() as session:
                families = list(self._families(session))
        except SQLAlchemyError as exc:
            log.warning("metrics scrape could not read the database: %s", exc)
            up.add_metric([], 0.0)
            yield up
            return
        yield from families
        up.add_metric([], 1.0)
        yield up

    def _families(self, session: Session) -> Iterator[Metric]:
        configs = {
            name: config
            for name, config in session.execute(select(StreamRow.name, StreamRow.config))
        }
        registered = set(configs)
        streams = [*sorted(registered), UNKNOWN]
        checkpoints = session.execute(
            select(
                CheckpointRow.stream, CheckpointRow.event_index, CheckpointRow.updated_at
            ).order_by(CheckpointRow.stream)
        ).all()
        stats = [
            (_bounded(s, registered), n, self._join_stats(session, s, (n, t)))
            for s, n, t in checkpoints
        ]
        events = _zeros(streams, EVENT_KINDS)
        for stream, n, join in stats:
            events[(stream, "prediction")] += n
            events[(stream, "label")] += 0 if join is None else join.labels_received
        yield _counter(
            "monitor_events_processed",
            "Events folded into the stream's checkpoint, by kind (prediction, label).",
            ["stream", "kind"],
            events.items(),
        )
        yield from self._alarm_families(session, registered, streams)
        yield from self._ood_families(session, registered, streams)
        yield from _join_families(stats, streams)
        yield from _trace_families(session, sorted(registered), configs)
        yield _webhook_family(session)
        yield from _alert_families(session)

    def _alarm_families(
        self, session: Session, registered: set[str], streams: list[str]
    ) -> Iterator[Metric]:
        versions = session.execute(
            select(AlarmRow.stream, AlarmRow.detector, AlarmRevisionRow.kind, func.count())
            .join(AlarmRevisionRow, AlarmRevisionRow.alarm_id == AlarmRow.id)
            .group_by(AlarmRow.stream, AlarmRow.detector, AlarmRevisionRow.kind)
        ).all()
        # every (detector, kind) a detector can raise, at 0, so series exist before alarms
        alarms = {(stream, d, k): 0.0 for stream in streams
                  for d, kinds in KINDS_OF_DETECTOR.items() for k in kinds}
        for s, d, k, n in versions:
            stream = _bounded(s, registered)
            key = (stream, d if d in DETECTORS else UNKNOWN, k if k in ALARM_KINDS else UNKNOWN)
            alarms[key] = alarms.get(key, 0.0) + n
        open_by_stream = _zeros(streams)
        unacknowledged = session.execute(
            select(AlarmRow.stream, func.count())
            .where(AlarmRow.acknowledged_at.is_(None))
            .group_by(AlarmRow.stream)
        ).all()
        for s, unacked in unacknowledged:
            open_by_stream[(_bounded(s, registered),)] += unacked
        yield _counter(
            "monitor_alarms", "Alarm diagnoses stored (each revision under its kind).",
            ["stream", "detector", "kind"], alarms.items(),
        )
        yield _gauge(
            "monitor_alarms_unacknowledged",
            "Alarms not yet acknowledged.",
            ["stream"],
            open_by_stream.items(),
        )
        letters = session.execute(
            select(DeadLetterRow.source, DeadLetterRow.stream, func.count()).group_by(
                DeadLetterRow.source, DeadLetterRow.stream
            )
        ).all()
        dead = _zeros([*SOURCE_KINDS, UNKNOWN], streams)
        for source, letter_stream, n in letters:
            dead[(source_kind(source), _bounded(letter_stream, registered))] += n
        yield _counter(
            "monitor_dead_letters",
            "Records that could not be processed, by source kind and stream.",
            ["source", "stream"],
            dead.items(),
        )

    def _ood_families(
        self, session: Session, registered: set[str], streams: list[str]
    ) -> Iterator[Metric]:
        rows = session.execute(
            select(OODWindowRow.stream, func.count(), func.sum(OODWindowRow.n_flagged)).group_by(
                OODWindowRow.stream
            )
        ).all()
        windows, flagged = _zeros(streams), _zeros(streams)
        for s, n, f in rows:
            windows[(_bounded(s, registered),)] += n
            flagged[(_bounded(s, registered),)] += f or 0
        yield _counter(
            "monitor_ood_windows", "OOD decision windows closed.", ["stream"], windows.items()
        )
        yield _counter(
            "monitor_ood_flagged",
            "Events flagged out-of-distribution.",
            ["stream"],
            flagged.items(),
        )

    def _join_stats(
        self, session: Session, stream: str, key: tuple[int, datetime]
    ) -> CheckpointStats | None:
        cached = self._join_cache.get(stream)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            checkpoint = load_state(session, stream)
            if checkpoint is None:
                return None
            stats = CheckpointStats.from_state(checkpoint.state)
        except (StateFormatError, KeyError, TypeError, ValueError, IndexError) as exc:
            log.warning("metrics: cannot read the label join of stream %r: %s", stream, exc)
            return None
        self._join_cache[stream] = (key, stats)
        return stats


def _join_families(
    stats: Sequence[tuple[str, int, CheckpointStats | None]], streams: list[str]
) -> Iterator[Metric]:
    """Label-join backlog and events without ts per stream (``unknown``: summed over
    unregistered streams; the lag is their largest)."""
    predictions, labels, lag = _zeros(streams), _zeros(streams), _zeros(streams)
    expired, without_ts = _zeros(streams, EVENT_KINDS), _zeros(streams)
    for stream, _, join in stats:
        if join is None:
            continue
        without_ts[(stream,)] += join.events_without_ts
        predictions[(stream,)] += join.pending_predictions
        labels[(stream,)] += join.pending_labels
        lag[(stream,)] = max(lag[(stream,)], join.lag_seconds)
        expired[(stream, "prediction")] += join.expired_predictions
        expired[(stream, "label")] += join.expired_labels
    yield _gauge(
        "monitor_label_join_pending_predictions",
        "Predictions waiting for their label.",
        ["stream"],
        predictions.items(),
    )
    yield _gauge(
        "monitor_label_join_pending_labels",
        "Labels waiting for their prediction.",
        ["stream"],
        labels.items(),
    )
    yield _gauge(
        "monitor_label_join_lag_seconds",
        "Event time between the oldest waiting prediction and the latest event.",
        ["stream"],
        lag.items(),
    )
    yield _counter(
        "monitor_label_join_expired",
        "Predictions or labels dropped unjoined.",
        ["stream", "kind"],
        expired.items(),
    )
    yield _counter(
        "monitor_events_without_ts",
        "Events processed without a ts (timed by the broker or at ingest).",
        ["stream"],
        without_ts.items(),
    )


def _trace_families(
    session: Session, streams: list[str], configs: Mapping[str, Any]
) -> Iterator[Metric]:
    """Latest trace point per registered stream and detector (one primary-key lookup each), and
    the configured thresholds."""
    latest = []
    for stream in streams:
        for detector in RULE_DETECTORS:  # the detectors that write trace points
            row = session.scalars(
                select(TracePointRow)
                .where(TracePointRow.stream == stream, TracePointRow.detector == detector)
                .order_by(TracePointRow.event_index.desc())
                .limit(1)
            ).first()
            if row is not None:
                latest.append(row)
    labels = ["stream", "detector"]
    for column, doc in _TRACE_GAUGES:
        yield _gauge(
            f"monitor_{column}",
            doc,
            labels,
            [((p.stream, p.detector), _value(getattr(p, column))) for p in latest],
        )
    thresholds: list[tuple[tuple[str, str], float]] = []
    budgets: list[tuple[tuple[str, str], float]] = []
    in_force = {(p.stream, p.detector): p.log_threshold for p in latest}
    for stream in streams:
        try:
            configured = configured_thresholds(dict(configs[stream] or {}))
            budgets += [((stream, d), s) for d, s in budget_seconds(
                dict(configs[stream] or {})).items()]
        except (ValueError, TypeError) as exc:
            log.warning("metrics: cannot read the alarm rule of stream %r: %s", stream, exc)
            continue
        for d in RULE_DETECTORS:
            value = configured[d]
            log_value = in_force.get((stream, d))
            if value is None and log_value is not None:
                value = math.exp(log_value)
            if value is not None:
                thresholds.append(((stream, d), value))
    yield _gauge(
        "monitor_threshold",
        "The detector's alarm-rule threshold as configured (ville: 1/alpha; events: 2 x events);"
        " under a time budget, the one in force at the latest trace point.",
        labels,
        thresholds,
    )
    yield _gauge(
        "monitor_alarm_budget_seconds",
        "The detector's false-alarm budget in time (false_alarm_every), in seconds.",
        labels,
        budgets,
    )
    yield _gauge(
        "monitor_trace_event_index",
        "Event index of the latest trace point.",
        labels,
        [((p.stream, p.detector), p.event_index) for p in latest],
    )


def _webhook_family(session: Session) -> Metric:
    result = case(
        (WebhookDeliveryRow.error.like("dropped%"), "dropped"),
        (WebhookDeliveryRow.status_code.between(200, 299), "success"),
        (WebhookDeliveryRow.status_code.is_not(None), "http_error"),
        else_="error",
    )
    counts = _zeros(WEBHOOK_RESULTS)
    for r, n in session.execute(select(result, func.count()).group_by(result)).all():
        counts[(r,)] = counts.get((r,), 0.0) + n
    return _counter(
        "monitor_webhook_deliveries",
        "Webhook delivery attempts by result.",
        ["result"],
        counts.items(),
    )


def _alert_families(session: Session) -> Iterator[Metric]:
    """Outbox gauges and attempts per receiver name (bounded: the receivers ever configured)."""
    rows = session.execute(
        select(AlertOutboxRow.receiver, AlertOutboxRow.status, func.count())
        .where(AlertOutboxRow.status.in_(OUTBOX_GAUGES))
        .group_by(AlertOutboxRow.receiver, AlertOutboxRow.status)
    ).all()
    receivers = sorted(set(session.scalars(select(AlertOutboxRow.receiver).distinct())))
    outbox = _zeros(receivers, OUTBOX_GAUGES)
    for receiver, status, n in rows:
        outbox[(receiver, status)] = n
    yield _gauge(
        "monitor_alert_outbox",
        "Alert deliveries pending (queued or waiting for a retry) and dead, by receiver.",
        ["receiver", "status"],
        outbox.items(),
    )
    result = case(
        (WebhookDeliveryRow.status_code.between(200, 299), "success"),
        (WebhookDeliveryRow.status_code.is_not(None), "http_error"),
        else_="error",
    )
    attempts = _zeros(receivers, ALERT_RESULTS)
    query = (
        select(WebhookDeliveryRow.receiver, result, func.count())
        .where(WebhookDeliveryRow.receiver.is_not(None))
        .group_by(WebhookDeliveryRow.receiver, result)
    )
    for receiver, r, n in session.execute(query).all():
        attempts[(receiver, r)] = n
    yield _counter(
        "monitor_alert_delivery_attempts",
        "Alert delivery attempts by receiver and result.",
        ["receiver", "result"],
        attempts.items(),
    )


def _counter(
    name: str, doc: str, labels: list[str], samples: Iterable[tuple[tuple[str, ...], float]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(list(values), float(value))
    return family


def _gauge(
    name: str, doc: str, labels: list[str], samples: Iterable[tuple[tuple[str, ...], float]]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for values, value in samples:
        family.add_metric(list(values), float(value))
    return family


def _zeros(*axes: Iterable[str]) -> dict[tuple[str, ...], float]:
    """Every combination of the label values of ``axes``, at 0 (series exist before events)."""
    out: dict[tuple[str, ...], float] = {(): 0.0}
    for axis in axes:
        out = {(*key, value): 0.0 for key in out for value in axis}
    return out


def _value(value: float | None) -> float:
    return math.nan if value is None else value
