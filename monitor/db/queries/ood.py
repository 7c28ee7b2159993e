"""OOD windows and their flagged events: by window index, keyset pages newest first."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from monitor.db.errors import InvalidCursorError
from monitor.db.models import OODFlagRow, OODWindowRow
from monitor.db.queries._filters import ge, gt, lt, where_given
from monitor.db.queries._paging import (
    INVALID,
    Page,
    bounded_count,
    check_limit,
    decode_cursor,
    encode_cursor,
)

__all__ = ["list_ood_windows", "ood_flags_query", "ood_page", "ood_windows_query"]


def ood_windows_query(
    stream: str,
    *,
    since_index: int | None = None,
    until_index: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Select[OODWindowRow]:
    """A stream's OOD windows by window index; ``*_index`` bound the windows' event ranges."""
    query = where_given(
        select(OODWindowRow).where(OODWindowRow.stream == stream),
        (OODWindowRow.end_index, gt, since_index),
        (OODWindowRow.start_index, lt, until_index),
        (OODWindowRow.ts, ge, since),
        (OODWindowRow.ts, lt, until),
    )
    return query.order_by(OODWindowRow.window_index)


def ood_flags_query(stream: str, window_indexes: Sequence[int] | None = None) -> Select[OODFlagRow]:
    """Flagged events of a stream (optionally of some windows), by window then event id."""
    query = select(OODFlagRow).where(OODFlagRow.stream == stream)
    if window_indexes is not None:
        query = query.where(OODFlagRow.window_index.in_(list(window_indexes)))
    return query.order_by(OODFlagRow.window_index, OODFlagRow.event_id)


def list_ood_windows(
    session: Session, stream: str, *, limit: int = 1000, after_window: int | None = None
) -> list[tuple[OODWindowRow, tuple[str, ...]]]:
    """Up to ``limit`` windows after ``after_window`` (keyset), each with its flagged event ids."""
    check_limit(limit)
    query = ood_windows_query(stream)
    if after_window is not None:
        query = query.where(OODWindowRow.window_index > after_window)
    return _with_flags(session, stream, list(session.scalars(query.limit(limit))))


def ood_page(
    session: Session,
    stream: str,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    cursor: str | None,
) -> tuple[Page[tuple[OODWindowRow, tuple[str, ...]]], tuple[int, bool]]:
    """A newest-first page of a stream's OOD windows with their flagged event ids, and the
    :func:`~monitor.db.queries.bounded_count` of the windows matching the filters."""
    query = ood_windows_query(stream, since=since, until=until)
    total = bounded_count(session, query)
    if cursor is not None:
        query = query.where(OODWindowRow.window_index < _window_after(cursor))
    query = query.order_by(None).order_by(OODWindowRow.window_index.desc())
    windows = list(session.scalars(query.limit(limit + 1)))
    more = len(windows) > limit
    items = _with_flags(session, stream, windows[:limit])
    if not more:
        return Page(items, None), total
    token = encode_cursor({"k": "ood", "o": "desc", "w": items[-1][0].window_index})
    return Page(items, token), total


def _with_flags(
    session: Session, stream: str, windows: list[OODWindowRow]
) -> list[tuple[OODWindowRow, tuple[str, ...]]]:
    """Each window with the ids of the events it flagged."""
    flags: dict[int, list[str]] = {w.window_index: [] for w in windows}
    if windows:
        for flag in session.scalars(ood_flags_query(stream, list(flags))):
            flags[flag.window_index].append(flag.flagged_id)
    return [(w, tuple(flags[w.window_index])) for w in windows]


def _window_after(cursor: str) -> int:
    value = decode_cursor(cursor, "ood", "desc").get("w")
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidCursorError(INVALID)
    return value
