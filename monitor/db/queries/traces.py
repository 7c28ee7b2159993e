"""Trace points: a stream's detector statistics event by event, paged or downsampled."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, TextClause, func, or_, select, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session, aliased

from monitor.db.errors import InvalidCursorError
from monitor.db.models import TracePointRow
from monitor.db.queries._filters import eq, ge, lt, where_given
from monitor.db.queries._json import json_object
from monitor.db.queries._paging import (
    INVALID,
    Page,
    after,
    check_limit,
    decode_cursor,
    encode_cursor,
)

__all__ = ["downsampled_trace", "list_traces", "trace_json_points", "traces_query"]


def traces_query(
    stream: str,
    *,
    detector: str | None = None,
    since_index: int | None = None,
    until_index: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Select[TracePointRow]:
    """A stream's trace points, ordered by ``(event_index, detector)``."""
    query = where_given(
        select(TracePointRow).where(TracePointRow.stream == stream),
        (TracePointRow.detector, eq, detector),
        (TracePointRow.event_index, ge, since_index),
        (TracePointRow.event_index, lt, until_index),
        (TracePointRow.ts, ge, since),
        (TracePointRow.ts, lt, until),
    )
    return query.order_by(TracePointRow.event_index, TracePointRow.detector)


def list_traces(
    session: Session,
    stream: str,
    *,
    detector: str | None = None,
    since_index: int | None = None,
    until_index: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 1000,
    cursor: str | None = None,
) -> Page[TracePointRow]:
    """One page of :func:`traces_query` (keyset on ``(event_index, detector)``)."""
    check_limit(limit)
    query = traces_query(
        stream,
        detector=detector,
        since_index=since_index,
        until_index=until_index,
        since=since,
        until=until,
    )
    if cursor is not None:
        key = decode_cursor(cursor, "traces", "asc")
        try:
            last_key = (int(key["i"]), str(key["d"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidCursorError(INVALID) from exc
        keys = (TracePointRow.event_index, TracePointRow.detector)
        query = query.where(after(keys, last_key, "asc"))
    rows = list(session.scalars(query.limit(limit + 1)))
    if len(rows) <= limit:
        return Page(rows, None)
    last = rows[limit - 1]
    token = encode_cursor({"k": "traces", "o": "asc", "i": last.event_index, "d": last.detector})
    return Page(rows[:limit], token)


def downsampled_trace(
    session: Session,
    stream: str,
    detector: str | None,
    since: datetime | None,
    until: datetime | None,
    max_points: int,
) -> tuple[list[TracePointRow], int]:
    """At most ``max_points`` trace points per detector, and the number stored in the range.

    A detector with more points is cut into buckets of ``width`` consecutive event indexes; each
    bucket keeps the point with the largest log-statistic (ties: the latest), and the detector's
    latest point is always kept, so the current value and every threshold crossing stay visible.
    """
    base = traces_query(stream, detector=detector, since=since, until=until).order_by(None)
    inner = base.subquery()
    spans = session.execute(
        select(
            inner.c.detector,
            func.count(),
            func.min(inner.c.event_index),
            func.max(inner.c.event_index),
        ).group_by(inner.c.detector)
    ).all()
    points: list[TracePointRow] = []
    for name, n, first, last in spans:
        query = base.where(TracePointRow.detector == name)
        if n > max_points:
            query = _bucket_peaks(query, first, last, max_points)
        points += session.scalars(query)
    points.sort(key=lambda p: (p.event_index, p.detector))
    return points, sum(n for _, n, _, _ in spans)


def _bucket_peaks(query: Any, first: int, last: int, max_points: int) -> Any:
    # One bucket per (max_points - 1) slots leaves room for the always-kept latest point.
    width = -(-(last - first + 1) // (max_points - 1))
    bucket = (TracePointRow.event_index - first) // width
    rank = func.row_number().over(
        partition_by=bucket,
        order_by=(
            TracePointRow.log_statistic.desc().nulls_last(),
            TracePointRow.event_index.desc(),
        ),
    )
    ranked = query.add_columns(rank.label("rank")).subquery()
    point = aliased(TracePointRow, ranked)
    return select(point).where(or_(ranked.c.rank == 1, ranked.c.event_index == last))


def trace_json_points(
    connection: Connection,
    stream: str,
    detector: str | None,
    since: datetime | None,
    until: datetime | None,
    max_points: int,
    columns: tuple[str, ...],
) -> tuple[list[str], int]:
    """PostgreSQL: the points :func:`downsampled_trace` keeps, each as the JSON text of its
    ``columns``, in one statement, and the number stored in the range.

    The bucket peaks are ranked on two narrow columns and only the kept points are read whole:
    ranking whole rows (the ORM path) sorted every stored row of the range with all its columns,
    about 40 ms per 25 000 points, and building objects for the kept ones cost as much again.
    """
    values = {"stream": stream, "detector": detector, "since": since, "until": until}
    present = {k: v for k, v in values.items() if v is not None}
    rows = connection.execute(
        _trace_statement(columns, frozenset(present)), present | {"max_points": max_points}
    ).all()
    stored = int(rows[0][1]) if rows else 0
    return [row[0] for row in rows], stored


@functools.cache
def _trace_statement(columns: tuple[str, ...], present: frozenset[str]) -> TextClause:
    """The statement of :func:`trace_json_points` for one combination of filters: rows of
    ``(point JSON, points stored in the range)``, by event index then detector.

    Per detector (``spans``): buckets of ``width`` consecutive event indexes, one per
    ``max_points - 1`` slots (the latest point is always kept too), or every point when there
    are at most ``max_points``. Each detector's peaks are ranked on their own (a sort of the
    detector's narrow rows; sorting both detectors' rows at once on the text column cost five
    times more) and the kept points are then read by primary key. ``kept`` is MATERIALIZED:
    inlined into the join, PostgreSQL may rank the peaks again for every joined row.
    """
    conditions = " AND ".join(
        ["t.stream = :stream"] + [_TRACE_FILTERS[name] for name in sorted(present - {"stream"})]
    )
    selected = tuple(getattr(TracePointRow, name) for name in columns)
    point = json_object(selected).compile(dialect=postgresql.dialect(paramstyle="named"))
    return text(f"""
        WITH spans AS (
            SELECT t.detector, count(*) AS n, min(t.event_index) AS first,
                   CASE WHEN count(*) > :max_points
                        THEN (max(t.event_index) - min(t.event_index) + :max_points - 1)
                             / (:max_points - 1)
                        ELSE 1 END AS width,
                   max(t.event_index) AS last
            FROM trace_points t WHERE {conditions} GROUP BY t.detector
        ), kept AS MATERIALIZED (
            SELECT s.detector, array(
                SELECT DISTINCT ON ((t.event_index - s.first) / s.width) t.event_index
                FROM trace_points t WHERE {conditions} AND t.detector = s.detector
                ORDER BY (t.event_index - s.first) / s.width,
                         t.log_statistic DESC NULLS LAST, t.event_index DESC
            ) || s.last AS indexes
            FROM spans s
        )
        SELECT {point}, (SELECT sum(n) FROM spans)
        FROM kept k JOIN trace_points
          ON trace_points.stream = :stream AND trace_points.detector = k.detector
             AND trace_points.event_index = ANY(k.indexes)
        ORDER BY trace_points.event_index, trace_points.detector
    """)


_TRACE_FILTERS = {
    "detector": "t.detector = :detector",
    "since": "t.ts >= :since",
    "until": "t.ts < :until",
}
