"""Queries the API needs beyond :mod:`monitor.db.repositories`: downsampled traces and a
newest-first keyset page of OOD windows. Both extend the repositories' ``Select`` statements."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, literal, or_, select
from sqlalchemy.orm import Session, aliased

from monitor.db import repositories as repo
from monitor.db.errors import InvalidCursorError
from monitor.db.models import OODWindowRow, TracePointRow

__all__ = ["COUNT_LIMIT", "bounded_count", "downsampled_trace", "ood_page"]

#: Lists count matching rows exactly up to this many; beyond it the count is this lower bound.
#: Counting every one of millions of rows would make a page cost O(table) instead of O(page).
COUNT_LIMIT = 10_000


def bounded_count(
    session: Session, query: Select[Any], limit: int | None = None
) -> tuple[int, bool]:
    """``(n, exact)``: the rows ``query`` matches if at most ``limit`` (default
    :data:`COUNT_LIMIT`), else ``(limit, False)``."""
    limit = COUNT_LIMIT if limit is None else limit
    # Only a constant is selected, so PostgreSQL can answer from the index (index-only scan).
    ones = query.with_only_columns(literal(1), maintain_column_froms=True)
    first = ones.order_by(None).limit(limit + 1).subquery()
    n = session.execute(select(func.count()).select_from(first)).scalar_one()
    return min(n, limit), n <= limit


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
    base = repo.traces_query(stream, detector=detector, since=since, until=until).order_by(None)
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


def ood_page(
    session: Session,
    stream: str,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    cursor: str | None,
) -> tuple[repo.Page[tuple[OODWindowRow, tuple[str, ...]]], tuple[int, bool]]:
    """A newest-first page of a stream's OOD windows with their flagged event ids, and the
    :func:`bounded_count` of the windows matching the filters."""
    query = repo.ood_windows_query(stream, since=since, until=until)
    total = bounded_count(session, query)
    if cursor is not None:
        query = query.where(OODWindowRow.window_index < _window_after(cursor))
    query = query.order_by(None).order_by(OODWindowRow.window_index.desc())
    windows = list(session.scalars(query.limit(limit + 1)))
    more = len(windows) > limit
    windows = windows[:limit]
    flags: dict[int, list[str]] = {w.window_index: [] for w in windows}
    if windows:
        for flag in session.scalars(repo.ood_flags_query(stream, list(flags))):
            flags[flag.window_index].append(flag.event_id)
    items = [(w, tuple(flags[w.window_index])) for w in windows]
    token = (
        repo.encode_cursor({"k": "ood", "o": "desc", "w": windows[-1].window_index})
        if more
        else None
    )
    return repo.Page(items, token), total


def _window_after(cursor: str) -> int:
    key = repo.decode_cursor(cursor, "ood", "desc")
    value = key.get("w")
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidCursorError("cursor is not valid: pass the next_cursor of a page")
    return value
