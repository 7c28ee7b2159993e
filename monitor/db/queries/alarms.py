"""Alarms: filtered and keyset-paged lists, one alarm and its revisions, acknowledgement, and
the plain-row pages and bounded counts of ``GET /alarms``."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, TypedDict

from sqlalchemy import Connection, Integer, Select, bindparam, select, tuple_
from sqlalchemy.orm import Session

from monitor.db.errors import AlarmNotFoundError, InvalidCursorError
from monitor.db.models import AlarmRevisionRow, AlarmRow, utcnow
from monitor.db.queries import _paging
from monitor.db.queries._filters import eq, ge, lt, where_given
from monitor.db.queries._json import json_object
from monitor.db.queries._paging import (
    INVALID,
    Order,
    Page,
    after,
    bounded_count_query,
    check_limit,
    check_order,
    decode_cursor,
    encode_cursor,
)
from monitor.db.queries._writes import begin_write
from monitor.streams.alarm_ids import MAX_CANDIDATES, choose, id_prefix, not_found

__all__ = [
    "AlarmFilters",
    "acknowledge_alarm",
    "alarm_count",
    "alarm_cursor",
    "alarm_cursor_key",
    "alarm_json_page",
    "alarm_page",
    "alarm_revisions_query",
    "alarms_query",
    "get_alarm",
    "list_alarms",
    "resolve_alarm_id",
]


def alarms_query(
    *,
    stream: str | None = None,
    kind: str | None = None,
    detector: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    acknowledged: bool | None = None,
    revised_since: datetime | None = None,
    order: Order = "desc",
    fleet: str | None = None,
) -> Select[AlarmRow]:
    """Alarms matching every given filter, ordered by ``(ts, id)`` (newest first by default).

    ``revised_since``: only alarms revised at or after this time (``revised_at``, the time of the
    event that completed the alarm's evidence), whatever their ``ts``; ``fleet``: only the alarms
    that fleet's cross-stream rule admitted.
    """
    check_order(order)
    query = where_given(
        select(AlarmRow),
        (AlarmRow.stream, eq, stream),
        (AlarmRow.fleet, eq, fleet),
        (AlarmRow.kind, eq, kind),
        (AlarmRow.detector, eq, detector),
        (AlarmRow.ts, ge, since),
        (AlarmRow.ts, lt, until),
        (AlarmRow.revised_at, ge, revised_since),
    )
    if acknowledged is not None:
        acked = AlarmRow.acknowledged_at.is_not(None)
        query = query.where(acked if acknowledged else AlarmRow.acknowledged_at.is_(None))
    keys = (AlarmRow.ts, AlarmRow.id)
    return query.order_by(*(k.asc() if order == "asc" else k.desc() for k in keys))


def list_alarms(
    session: Session,
    *,
    stream: str | None = None,
    kind: str | None = None,
    detector: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    acknowledged: bool | None = None,
    order: Order = "desc",
    limit: int = 100,
    cursor: str | None = None,
    fleet: str | None = None,
) -> Page[AlarmRow]:
    """One page of :func:`alarms_query`; pass ``next_cursor`` back to get the next page.

    Examples
    --------
    >>> import tempfile
    >>> from monitor.db.engine import make_engine, session_factory
    >>> from monitor.db.migrate import upgrade
    >>> folder = tempfile.TemporaryDirectory()
    >>> url = f"sqlite:///{folder.name}/monitor.db"
    >>> upgrade(url)
    >>> engine = make_engine(url)
    >>> with session_factory(engine)() as session:
    ...     page = list_alarms(session, stream="bikes", limit=10)
    >>> page.items, page.next_cursor
    ([], None)
    >>> engine.dispose(); folder.cleanup()
    """
    check_limit(limit)
    query = alarms_query(
        fleet=fleet,
        stream=stream,
        kind=kind,
        detector=detector,
        since=since,
        until=until,
        acknowledged=acknowledged,
        order=order,
    )
    if cursor is not None:
        key = alarm_cursor_key(cursor, order)
        query = query.where(after((AlarmRow.ts, AlarmRow.id), key, order))
    rows = list(session.scalars(query.limit(limit + 1)))
    if len(rows) <= limit:
        return Page(rows, None)
    last = rows[limit - 1]
    return Page(rows[:limit], alarm_cursor(last.ts, last.id, order))


def alarm_cursor(ts: datetime, alarm_id: str, order: Order) -> str:
    """The cursor of a page of alarms whose last row has this ``(ts, id)`` sort key."""
    return encode_cursor({"k": "alarms", "o": order, "ts": ts.isoformat(), "id": alarm_id})


def alarm_cursor_key(cursor: str, order: Order) -> tuple[datetime, str]:
    """The ``(ts, id)`` sort key of an :func:`alarm_cursor`."""
    key = decode_cursor(cursor, "alarms", order)
    try:
        ts, alarm_id = datetime.fromisoformat(key["ts"]), key["id"]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidCursorError(INVALID) from exc
    if set(key) != {"k", "o", "ts", "id"} or ts.tzinfo is None or not isinstance(alarm_id, str):
        raise InvalidCursorError(INVALID)
    return ts, alarm_id


def get_alarm(session: Session, alarm_id: str) -> AlarmRow | None:
    """The alarm with this id, or ``None``."""
    return session.get(AlarmRow, alarm_id)


def resolve_alarm_id(session: Session, text: str) -> str:
    """The id of the alarm that ``text`` names: its whole id, or a prefix of at least four
    hexadecimal digits that no other alarm's id starts with (:mod:`monitor.streams.alarm_ids`).

    Raises
    ------
    AlarmNotFoundError
        No alarm has this id or an id starting with it.
    AmbiguousAlarmIdError
        Several alarm ids start with it (listed, at most ten).
    """
    if session.get(AlarmRow, text) is not None:
        return text
    found = None
    prefix = id_prefix(text)
    if prefix is not None:
        # Ids are stored as lower-case UUID text on both dialects (no UUID type): LIKE 'p%'.
        query = (
            select(AlarmRow.id)
            .where(AlarmRow.id.startswith(prefix, autoescape=True))
            .order_by(AlarmRow.id)
            .limit(MAX_CANDIDATES + 1)
        )
        found = choose(text, session.scalars(query))
    if found is None:
        raise AlarmNotFoundError(not_found(text))
    return found


def alarm_revisions_query(alarm_id: str) -> Select[AlarmRevisionRow]:
    """Every stored version of an alarm, oldest (revision 1) first."""
    return (
        select(AlarmRevisionRow)
        .where(AlarmRevisionRow.alarm_id == alarm_id)
        .order_by(AlarmRevisionRow.revision)
    )


def acknowledge_alarm(
    session: Session, alarm_id: str, *, by: str, at: datetime | None = None
) -> AlarmRow:
    """Mark an alarm acknowledged and commit; the first acknowledgement is kept. ``alarm_id``
    is an id or a prefix of one (:func:`resolve_alarm_id`).

    Raises
    ------
    AlarmNotFoundError
        No alarm has this id.
    AmbiguousAlarmIdError
        Several alarm ids start with it.
    """
    begin_write(session)
    try:
        whole = resolve_alarm_id(session, alarm_id)
    except LookupError:
        session.rollback()
        raise
    alarm = session.get(AlarmRow, whole, with_for_update=True)
    if alarm is None:  # deleted between the two reads (retention)
        session.rollback()
        raise AlarmNotFoundError(f"no alarm with id {alarm_id!r}")
    if alarm.acknowledged_at is None:
        alarm.acknowledged_at = at or utcnow()
        alarm.acknowledged_by = by
    session.commit()
    return alarm


# --- the pages of GET /alarms ------------------------------------------------------------------


class AlarmFilters(TypedDict):
    """The filters of ``GET /alarms`` (``None``: not filtered), as :func:`alarms_query` takes
    them."""

    stream: str | None
    kind: str | None
    detector: str | None
    since: datetime | None
    until: datetime | None
    acknowledged: bool | None
    revised_since: datetime | None
    fleet: str | None


def alarm_page(
    connection: Connection,
    filters: AlarmFilters,
    limit: int,
    cursor: str | None,
    columns: tuple[str, ...],
) -> Page[dict[str, Any]]:
    """A newest-first page of :func:`alarms_query`: dicts of the alarm ``columns``.

    The same rows and cursors as :func:`list_alarms` (the cursors are interchangeable), without
    an ORM object per row: a list only reads columns, and building and validating ORM objects
    was half of the CPU time of a ``GET /alarms`` request. Plain dicts, because pydantic-core
    validates them twice as fast as Core rows read as attributes.
    """
    page_query = _page_statement(columns, *_shape(filters), keyed=cursor is not None)
    fetched = connection.execute(page_query, _page_values(filters, limit, cursor)).all()
    rows = [dict(zip(columns, row, strict=True)) for row in fetched]
    if len(rows) <= limit:
        return Page(rows, None)
    last = rows[limit - 1]
    return Page(rows[:limit], alarm_cursor(last["ts"], last["id"], "desc"))


def alarm_json_page(
    connection: Connection,
    filters: AlarmFilters,
    limit: int,
    cursor: str | None,
    columns: tuple[str, ...],
) -> tuple[Page[str], tuple[int, bool]]:
    """PostgreSQL: :func:`alarm_page` with each row as the JSON text of its ``columns``
    (:func:`~monitor.db.queries._json.json_object`), and :func:`alarm_count`, in one
    statement."""
    statement = _page_statement(columns, *_shape(filters), keyed=cursor is not None, as_json=True)
    values = _page_values(filters, limit, cursor) | {"count_rows": _paging.COUNT_LIMIT + 1}
    rows = connection.execute(statement, values).all()
    # No page, no count column: count on its own (zero unless past the last page).
    total = _paging.bounded(rows[0][3]) if rows else alarm_count(connection, filters)
    next_cursor = None
    if len(rows) > limit:
        _, ts, alarm_id, _ = rows[limit - 1]
        next_cursor = alarm_cursor(ts, alarm_id, "desc")
    return Page([row[0] for row in rows[:limit]], next_cursor), total


def alarm_count(connection: Connection, filters: AlarmFilters) -> tuple[int, bool]:
    """The :func:`~monitor.db.queries.bounded_count` of the alarms matching ``filters``."""
    values = _values(filters) | {"count_rows": _paging.COUNT_LIMIT + 1}
    n = connection.execute(_count_statement(*_shape(filters)), values).scalar_one()
    return _paging.bounded(n)


def _page_values(filters: AlarmFilters, limit: int, cursor: str | None) -> dict[str, Any]:
    values: dict[str, Any] = _values(filters) | {"page_size": limit + 1}
    if cursor is not None:
        values["after_ts"], values["after_id"] = alarm_cursor_key(cursor, "desc")
    return values


def _shape(filters: AlarmFilters) -> tuple[frozenset[str], bool | None]:
    return frozenset(_values(filters)), filters["acknowledged"]


def _values(filters: AlarmFilters) -> dict[str, Any]:
    return {k: v for k, v in filters.items() if v is not None and k != "acknowledged"}


# Building a ``Select`` and matching its result columns to the compiled statement's cost more CPU
# than running it; one statement object per combination of filters (at most 2**6 * 3 * 2 per
# set of columns) is built once and reused, so SQLAlchemy's compiled cache answers from the
# statement's memoised key. Bound parameters stand in place of the values.


def _filtered(present: frozenset[str], acknowledged: bool | None) -> Select[AlarmRow]:
    # alarms_query compares each column with what it is given; a bind parameter there takes the
    # column's type, so values are bound exactly as a literal would be.
    params: dict[str, Any] = {name: bindparam(name) for name in present}
    return alarms_query(**params, acknowledged=acknowledged)


@functools.cache
def _count_statement(present: frozenset[str], acknowledged: bool | None) -> Select[Any]:
    """The bounded count of one combination of filters."""
    return bounded_count_query(
        _filtered(present, acknowledged), bindparam("count_rows", type_=Integer)
    )


@functools.cache
def _page_statement(
    columns: tuple[str, ...],
    present: frozenset[str],
    acknowledged: bool | None,
    keyed: bool,
    as_json: bool = False,
) -> Select[Any]:
    """The page statement of one combination of filters. ``as_json`` (PostgreSQL): the rows are
    ``(json, ts, id, count)``, with each alarm's JSON text and the bounded count."""
    base = _filtered(present, acknowledged)
    selected = tuple(getattr(AlarmRow, name) for name in columns)
    if as_json:
        count = _count_statement(present, acknowledged).scalar_subquery()
        page = base.with_only_columns(json_object(selected), AlarmRow.ts, AlarmRow.id, count)
    else:
        page = base.with_only_columns(*selected)
    if keyed:
        key = tuple_(bindparam("after_ts", type_=AlarmRow.ts.type), bindparam("after_id"))
        page = page.where(tuple_(AlarmRow.ts, AlarmRow.id) < key)
    return page.limit(bindparam("page_size", type_=Integer))
