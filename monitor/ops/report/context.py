"""What a report shows about one alarm, read from the database: :class:`ReportContext`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from monitor.streams.records import Alarm, TracePoint, iso

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

#: The detectors whose traces every report draws; another detector's (e.g. ``data_quality``)
#: are drawn too when the window holds some.
DETECTORS: tuple[str, str] = ("covariate", "conditional")

#: Events shown before the changepoint and after the alarm, at least.
MIN_PAD = 300

#: Performance windows compared on each side of the changepoint: the nearest ones.
AROUND = 2

_PERFORMANCE_KEYS = ("stream", "window_index", "start_index", "end_index", "ts", "n", "metrics")


@dataclass(frozen=True)
class ReportContext:
    """Everything a report shows about one alarm.

    Attributes
    ----------
    alarm
        The alarm, with its diagnosis (``kind``, ``changepoint``) and ``evidence``.
    traces
        Trace points of each detector in :attr:`window`, by detector, in event order.
    window
        The event indexes ``[start, stop)`` shown (:func:`trace_window`).
    performance
        The stream's performance windows ``{"stream", "window_index", "start_index",
        "end_index", "ts", "n", "metrics": {name: value}}``, or None when they are not known.
    """

    alarm: Alarm
    traces: dict[str, list[TracePoint]]
    window: tuple[int, int]
    performance: list[dict[str, Any]] | None = None
    acknowledged: str | None = field(default=None)

    @property
    def attribution(self) -> dict[str, Any] | None:
        value = self.alarm.evidence.get("attribution")
        return value if isinstance(value, dict) and value.get("features") else None

    @property
    def directions(self) -> list[dict[str, Any]] | None:
        value = self.alarm.evidence.get("density_ratio_directions")
        return value if isinstance(value, list) and value else None

    @property
    def indicators(self) -> list[dict[str, Any]] | None:
        """A data-quality alarm's indicators (feature, rate, calibration and later rates)."""
        value = self.alarm.evidence.get("indicators")
        if self.alarm.kind != "data_quality" or not isinstance(value, list):
            return None
        return [i for i in value if isinstance(i, dict)] or None

    @property
    def schema_change(self) -> dict[str, Any] | None:
        """A schema-change alarm's evidence (change, key, first event index, events)."""
        evidence = self.alarm.evidence
        return evidence if self.alarm.kind == "schema_change" and "key" in evidence else None

    @property
    def cut(self) -> int:
        """Where the performance comparison splits: the changepoint estimate, else the alarm."""
        a = self.alarm
        return a.changepoint if a.changepoint is not None else a.event_index

    @property
    def before_after(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The :data:`AROUND` performance windows nearest the changepoint that end before it,
        and the :data:`AROUND` nearest that start at or after it, each in event order; a window
        across the changepoint mixes both and is in neither. Wherever they lie: a window holds
        a fixed number of labels, so it may span more events than the report's traces."""
        windows = sorted(self.performance or (), key=lambda w: w["start_index"])
        before = [w for w in windows if w["end_index"] < self.cut][-AROUND:]
        after = [w for w in windows if w["start_index"] >= self.cut][:AROUND]
        return before, after

    @property
    def performance_span(self) -> tuple[int, int]:
        """The event indexes ``[start, stop)`` of the performance figure: the report's
        :attr:`window`, widened to the compared windows."""
        before, after = self.before_after
        chosen = before + after
        start = min([self.window[0], *(w["start_index"] for w in chosen)])
        stop = max([self.window[1], *(w["end_index"] + 1 for w in chosen)])
        return start, stop

    @property
    def traced(self) -> list[str]:
        """The detectors drawn: :data:`DETECTORS`, then any other with points in the window."""
        more = sorted(d for d, points in self.traces.items() if d not in DETECTORS and points)
        return [*DETECTORS, *more]


def trace_window(alarm: Alarm) -> tuple[int, int]:
    """The event indexes ``[start, stop)`` a report shows: from before the changepoint estimate
    to after the alarm, padded by half the changepoint-to-alarm distance (at least
    :data:`MIN_PAD`).

    >>> from datetime import UTC, datetime
    >>> a = Alarm("s", "conditional", "concept_shift", "e-1", 1000, datetime.now(UTC), 700,
    ...           2e4, 1e4, "shiryaev_roberts")
    >>> trace_window(a)
    (400, 1301)
    """
    start = alarm.event_index
    if alarm.changepoint is not None and 0 <= alarm.changepoint <= alarm.event_index:
        start = alarm.changepoint
    pad = max(MIN_PAD, (alarm.event_index - start) // 2)
    return max(0, start - pad), alarm.event_index + pad + 1


def report_context(
    session: Session, alarm_id: str, performance: Sequence[Mapping[str, Any]] | None = None
) -> ReportContext:
    """Read an alarm and the detectors' traces around it from the database.

    ``performance`` is the stream's performance windows (the before/after comparison uses all
    of them, the figure those in the report's window); None reads the stream's stored ones
    (:func:`monitor.db.queries.performance_windows`, the latest 1000); malformed windows
    raise :class:`ValueError`.

    Raises
    ------
    AlarmNotFoundError
        No alarm has this id.
    """
    from monitor.db import queries
    from monitor.db.errors import AlarmNotFoundError

    row = queries.get_alarm(session, alarm_id)
    if row is None:
        raise AlarmNotFoundError(f"no alarm with id {alarm_id!r}")
    alarm = row.to_record()
    start, stop = trace_window(alarm)
    query = queries.traces_query(alarm.stream, since_index=start, until_index=stop)
    traces: dict[str, list[TracePoint]] = {d: [] for d in DETECTORS}
    for point in session.scalars(query):
        traces.setdefault(point.detector, []).append(point.to_record())
    if performance is None:  # the stored ones; None when the stream has none
        performance = queries.performance_windows(session, alarm.stream, limit=1000) or None
    windows = None if performance is None else check_performance(performance)
    ack = None
    if row.acknowledged_at is not None:
        ack = f"{iso(row.acknowledged_at)} by {row.acknowledged_by}"
    return ReportContext(alarm, traces, (start, stop), windows, ack)


def check_performance(windows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The performance windows as plain dicts, checked (a clear :class:`ValueError` if not)."""
    out = []
    for i, window in enumerate(windows):
        missing = [k for k in _PERFORMANCE_KEYS if k not in window]
        if missing:
            raise ValueError(f"performance window {i} lacks {missing}")
        metrics = window["metrics"]
        if not isinstance(metrics, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in metrics.values()
        ):
            raise ValueError(f"performance window {i}: 'metrics' must map names to numbers")
        out.append({**window, "metrics": dict(metrics)})
    return out


def adjusted_p(feature: Mapping[str, Any]) -> float:
    """A feature's Holm-adjusted p-value (``p_adjusted``, or the typed attribution's
    ``adjusted_p_value``); nan when it has none."""
    p = feature.get("p_adjusted", feature.get("adjusted_p_value"))
    return float(p) if isinstance(p, int | float) and not isinstance(p, bool) else math.nan


def ranked(features: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Features by adjusted p-value, smallest first (those without one last)."""
    def key(f: Mapping[str, Any]) -> float:
        p = adjusted_p(f)
        return math.inf if math.isnan(p) else p

    return sorted(features, key=key)


def frequencies(feature: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, float]] | None:
    """A categorical feature's category shares ``(calibration, window)`` over the union of
    their categories (0 where one lacks a category), or None when the evidence has none."""
    value = feature.get("frequencies")
    if not isinstance(value, Mapping):
        return None
    before, after = value.get("calibration"), value.get("window")
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return None
    cells = [*before, *(c for c in after if c not in before)]
    return ({str(c): float(before.get(c, 0.0)) for c in cells},
            {str(c): float(after.get(c, 0.0)) for c in cells})
