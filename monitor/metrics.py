"""Prometheus metrics read from the database at scrape time.

:class:`DatabaseCollector` holds no counters of its own: every scrape reads the stored results
(checkpoints, alarms, dead letters, trace points, OOD windows, webhook deliveries), so any number
of API replicas report the same values and a restart loses nothing.

Metric names (labels in braces):

- ``monitor_events_processed_total{stream}``: events folded into the stream's checkpoint
- ``monitor_alarms_total{stream,detector,kind}``: alarms stored
- ``monitor_alarms_unacknowledged{stream}``: alarms not yet acknowledged
- ``monitor_dead_letters_total{source}``: records that could not be processed
- ``monitor_ood_windows_total{stream}``: OOD decision windows closed
- ``monitor_ood_flagged_total{stream}``: events flagged out-of-distribution
- ``monitor_label_join_pending_predictions{stream}``: predictions waiting for their label
- ``monitor_label_join_pending_labels{stream}``: labels waiting for their prediction
- ``monitor_label_join_lag_seconds{stream}``: event time from the oldest waiting prediction to
  the stream's latest event
- ``monitor_label_join_expired_total{stream,kind}``: predictions / labels dropped unjoined
- ``monitor_log_martingale{stream,detector}``: latest log test-martingale (natural log)
- ``monitor_p_value{stream,detector}``: latest conformal p-value
- ``monitor_log_statistic{stream,detector}``: latest log of the alarm rule's statistic
- ``monitor_log_threshold{stream,detector}`` and ``monitor_threshold{stream,detector}``: the alarm
  rule's threshold (log and plain)
- ``monitor_trace_event_index{stream,detector}``: event index of that latest trace point
- ``monitor_webhook_deliveries_total{result}``: delivery attempts by ``result``: ``success``,
  ``http_error``, ``error`` (no answer) or ``dropped``
- ``monitor_database_up``: 1 if the scrape could read the database
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import case, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from monitor.db.models import (
    AlarmRow,
    CheckpointRow,
    DeadLetterRow,
    OODWindowRow,
    TracePointRow,
    WebhookDeliveryRow,
)
from monitor.db.store import load_state
from monitor.records import DETECTORS
from monitor.state import StateFormatError

__all__ = ["DatabaseCollector", "JoinStats"]

log = logging.getLogger(__name__)

_TRACE_GAUGES = (
    ("log_martingale", "Latest log test-martingale (natural log) of the detector."),
    ("p_value", "Latest conformal p-value of the detector."),
    ("log_statistic", "Latest log of the detector's alarm-rule statistic."),
    ("log_threshold", "Log of the detector's alarm-rule threshold."),
)


@dataclass(frozen=True, slots=True)
class JoinStats:
    """The label join's backlog, read from a stream's checkpoint."""

    pending_predictions: int
    pending_labels: int
    lag_seconds: float
    expired_predictions: int
    expired_labels: int

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> JoinStats:
        """From a ``StreamMonitor.state_dict()``.

        Examples
        --------
        >>> join = {"predictions": [["a", 0, 100.0, [1.0], 2.0]], "labels": [],
        ...         "counts": [3, 1, 7]}
        >>> stats = JoinStats.from_state({"join": join, "last_ts": "1970-01-01T00:02:30+00:00"})
        >>> stats.pending_predictions, stats.lag_seconds, stats.expired_predictions
        (1, 50.0, 3)
        """
        join = state.get("join") or {}
        predictions = join.get("predictions") or []
        counts = join.get("counts") or [0, 0, 0]
        last = state.get("last_ts")
        lag = 0.0
        if predictions and last:
            oldest = min(float(row[2]) for row in predictions)
            lag = max(0.0, datetime.fromisoformat(last).timestamp() - oldest)
        return cls(
            len(predictions), len(join.get("labels") or []), lag, int(counts[0]), int(counts[1])
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
        self._join_cache: dict[str, tuple[tuple[int, datetime], JoinStats]] = {}

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
        checkpoints = session.execute(
            select(
                CheckpointRow.stream, CheckpointRow.event_index, CheckpointRow.updated_at
            ).order_by(CheckpointRow.stream)
        ).all()
        yield _counter(
            "monitor_events_processed",
            "Events folded into the stream's checkpoint.",
            ["stream"],
            [((s,), n) for s, n, _ in checkpoints],
        )
        yield from self._alarm_families(session)
        yield from self._ood_families(session)
        yield from self._join_families(session, checkpoints)
        yield from _trace_families(session, [s for s, _, _ in checkpoints])
        yield _webhook_family(session)

    def _alarm_families(self, session: Session) -> Iterator[Metric]:
        rows = session.execute(
            select(
                AlarmRow.stream,
                AlarmRow.detector,
                AlarmRow.kind,
                func.count(),
                func.count(case((AlarmRow.acknowledged_at.is_(None), 1))),
            ).group_by(AlarmRow.stream, AlarmRow.detector, AlarmRow.kind)
        ).all()
        yield _counter(
            "monitor_alarms",
            "Alarms stored.",
            ["stream", "detector", "kind"],
            [((s, d, k), n) for s, d, k, n, _ in rows],
        )
        open_by_stream: dict[str, int] = {}
        for s, _, _, _, unacked in rows:
            open_by_stream[s] = open_by_stream.get(s, 0) + unacked
        yield _gauge(
            "monitor_alarms_unacknowledged",
            "Alarms not yet acknowledged.",
            ["stream"],
            [((s,), n) for s, n in sorted(open_by_stream.items())],
        )
        letters = session.execute(
            select(DeadLetterRow.source, func.count()).group_by(DeadLetterRow.source)
        ).all()
        yield _counter(
            "monitor_dead_letters",
            "Records that could not be processed.",
            ["source"],
            [((s,), n) for s, n in letters],
        )

    def _ood_families(self, session: Session) -> Iterator[Metric]:
        rows = session.execute(
            select(OODWindowRow.stream, func.count(), func.sum(OODWindowRow.n_flagged)).group_by(
                OODWindowRow.stream
            )
        ).all()
        yield _counter(
            "monitor_ood_windows",
            "OOD decision windows closed.",
            ["stream"],
            [((s,), n) for s, n, _ in rows],
        )
        yield _counter(
            "monitor_ood_flagged",
            "Events flagged out-of-distribution.",
            ["stream"],
            [((s,), f) for s, _, f in rows],
        )

    def _join_families(self, session: Session, checkpoints: Sequence[Any]) -> Iterator[Metric]:
        stats = [(s, self._join_stats(session, s, (n, t))) for s, n, t in checkpoints]
        known = [(s, j) for s, j in stats if j is not None]
        yield _gauge(
            "monitor_label_join_pending_predictions",
            "Predictions waiting for their label.",
            ["stream"],
            [((s,), j.pending_predictions) for s, j in known],
        )
        yield _gauge(
            "monitor_label_join_pending_labels",
            "Labels waiting for their prediction.",
            ["stream"],
            [((s,), j.pending_labels) for s, j in known],
        )
        yield _gauge(
            "monitor_label_join_lag_seconds",
            "Event time between the oldest waiting prediction and the latest event.",
            ["stream"],
            [((s,), j.lag_seconds) for s, j in known],
        )
        yield _counter(
            "monitor_label_join_expired",
            "Predictions or labels dropped unjoined.",
            ["stream", "kind"],
            [((s, "prediction"), j.expired_predictions) for s, j in known]
            + [((s, "label"), j.expired_labels) for s, j in known],
        )

    def _join_stats(
        self, session: Session, stream: str, key: tuple[int, datetime]
    ) -> JoinStats | None:
        cached = self._join_cache.get(stream)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            checkpoint = load_state(session, stream)
            if checkpoint is None:
                return None
            stats = JoinStats.from_state(checkpoint.state)
        except (StateFormatError, KeyError, TypeError, ValueError, IndexError) as exc:
            log.warning("metrics: cannot read the label join of stream %r: %s", stream, exc)
            return None
        self._join_cache[stream] = (key, stats)
        return stats


def _trace_families(session: Session, streams: list[str]) -> Iterator[Metric]:
    """Latest trace point per stream and detector (one primary-key lookup each)."""
    latest = []
    for stream in streams:
        for detector in DETECTORS:
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
    yield _gauge(
        "monitor_threshold",
        "The detector's alarm-rule threshold.",
        labels,
        [((p.stream, p.detector), _exp(p.log_threshold)) for p in latest],
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
    rows = session.execute(select(result, func.count()).group_by(result)).all()
    return _counter(
        "monitor_webhook_deliveries",
        "Webhook delivery attempts by result.",
        ["result"],
        [((r,), n) for r, n in rows],
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


def _value(value: float | None) -> float:
    return math.nan if value is None else value


def _exp(log_value: float | None) -> float:
    if log_value is None:
        return math.nan
    return math.exp(min(log_value, 709.0))  # exp(709.8) overflows a double
