"""Model performance windows: a stream's metrics over consecutive windows of labelled events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from monitor.db.models import PerformanceWindowRow
from monitor.db.queries._filters import ge, lt, where_given
from monitor.db.queries._paging import check_limit

__all__ = ["PERFORMANCE_FIELDS", "performance_windows", "performance_windows_query"]

#: The keys of each dict :func:`performance_windows` returns.
PERFORMANCE_FIELDS: tuple[str, ...] = (
    "stream", "window_index", "start_index", "end_index", "ts", "n", "metrics",
)


def performance_windows_query(
    stream: str, *, since: datetime | None = None, until: datetime | None = None
) -> Select[PerformanceWindowRow]:
    """A stream's performance windows with ``since <= ts < until``, by window index."""
    query = where_given(
        select(PerformanceWindowRow).where(PerformanceWindowRow.stream == stream),
        (PerformanceWindowRow.ts, ge, since),
        (PerformanceWindowRow.ts, lt, until),
    )
    return query.order_by(PerformanceWindowRow.window_index)


def performance_windows(
    session: Session,
    stream: str,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """The latest ``limit`` performance windows of ``stream`` with ``since <= ts < until``, oldest
    first, as dicts with the keys :data:`PERFORMANCE_FIELDS` (``metrics``: name → value)."""
    check_limit(limit)
    query = performance_windows_query(stream, since=since, until=until)
    query = query.order_by(None).order_by(PerformanceWindowRow.window_index.desc()).limit(limit)
    rows = list(session.scalars(query))[::-1]
    return [{name: getattr(row, name) for name in PERFORMANCE_FIELDS} for row in rows]

