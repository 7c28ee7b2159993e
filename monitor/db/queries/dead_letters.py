"""Dead letters: records that could not be monitored, newest first, and the candidates of
``monitor dead-letters list|replay``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, func, or_, select
from sqlalchemy.orm import Session

from monitor.db.models import DeadLetterRow, source_key
from monitor.db.queries._filters import eq, ge, lt, where_given
from monitor.db.queries._paging import check_limit

__all__ = ["dead_letter_candidates_query", "dead_letters_query", "list_dead_letters"]


def dead_letters_query(
    *,
    source: str | None = None,
    stream: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Select[DeadLetterRow]:
    """Dead letters matching the filters, newest first (by ``ts``, then id); ``source`` is a
    source's whole name."""
    query = select(DeadLetterRow)
    if source is not None:
        query = query.where(DeadLetterRow.source == source_key(source))
    query = where_given(
        query,
        (DeadLetterRow.stream, eq, stream),
        (DeadLetterRow.ts, ge, since),
        (DeadLetterRow.ts, lt, until),
    )
    return query.order_by(DeadLetterRow.ts.desc(), DeadLetterRow.id.desc())


def list_dead_letters(
    session: Session,
    *,
    source: str | None = None,
    stream: str | None = None,
    limit: int = 100,
) -> list[DeadLetterRow]:
    """The ``limit`` newest dead letters matching the filters."""
    check_limit(limit)
    query = dead_letters_query(source=source, stream=stream)
    return list(session.scalars(query.limit(limit)))



def dead_letter_candidates_query(
    *,
    source: str | None = None,
    stream: str | None = None,
    since: datetime | None = None,
    reason_contains: str | None = None,
) -> Select[DeadLetterRow]:
    """Dead letters that may match the filters of ``monitor dead-letters list|replay``, unordered.

    ``stream`` keeps the rows stored under that stream *and* those stored without one (a
    record of a stream that was not registered yet, or that did not decode): the caller keeps
    those whose payload names the stream. ``reason_contains`` is matched case-insensitively;
    ``since`` bounds the record time ``ts``; ``source`` is a source's whole name.
    """
    query = select(DeadLetterRow)
    if source is not None:
        query = query.where(DeadLetterRow.source == source_key(source))
    if stream is not None:
        query = query.where(or_(DeadLetterRow.stream == stream, DeadLetterRow.stream.is_(None)))
    if since is not None:
        query = query.where(DeadLetterRow.ts >= since)
    if reason_contains:
        query = query.where(
            func.lower(DeadLetterRow.reason).contains(reason_contains.lower(), autoescape=True)
        )
    return query

