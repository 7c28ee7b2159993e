"""Queries the API needs beyond :mod:`monitor.db.repositories`: a page of alarms as plain rows,
downsampled traces and a newest-first keyset page of OOD windows. All extend the repositories'
``Select`` statements."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any, TypedDict

from pydantic import TypeAdapter
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Float,
    Integer,
    Select,
    Text,
    TextClause,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
    tuple_,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import InstrumentedAttribute, Session, aliased

from monitor.api.schemas import AlarmPublic, AlarmsPublic, TracePointPublic, TracePublic
from monitor.db import repositories as repo
from monitor.db.errors import InvalidCursorError
from monitor.db.models import AlarmRow, OODWindowRow, TracePointRow
from monitor.db.types import UTCDateTime

__all__ = [
    "ALARM_COLUMNS",
    "COUNT_LIMIT",
    "AlarmFilters",
    "alarm_count",
    "alarm_page",
    "alarms_body",
    "alarms_body_python",
    "alarms_body_sql",
    "bounded_count",
    "downsampled_trace",
    "ood_page",
    "trace_body",
    "trace_body_sql",
]

#: Lists count matching rows exactly up to this many; beyond it the count is this lower bound.
#: Counting every one of millions of rows would make a page cost O(table) instead of O(page).
COUNT_LIMIT = 10_000


#: The columns ``GET /alarms`` shows, named and ordered as the fields of :class:`AlarmPublic`.
ALARM_COLUMNS = tuple(getattr(AlarmRow, name) for name in AlarmPublic.model_fields)
_ALARM_KEYS = tuple(AlarmPublic.model_fields)


def bounded_count(
    session: Session | Connection, query: Select[Any], limit: int | None = None
) -> tuple[int, bool]:
    """``(n, exact)``: the rows ``query`` matches if at most ``limit`` (default
    :data:`COUNT_LIMIT`), else ``(limit, False)``."""
    limit = COUNT_LIMIT if limit is None else limit
    return _bounded(session.execute(_bounded_count_query(query, limit + 1)).scalar_one(), limit)


def _bounded_count_query(query: Select[Any], rows: int | BindParameter[int]) -> Select[Any]:
    # Only a constant is selected, so PostgreSQL can answer from the index (index-only scan).
    ones = query.with_only_columns(literal(1), maintain_column_froms=True)
    return select(func.count()).select_from(ones.order_by(None).limit(rows).subquery())


class AlarmFilters(TypedDict):
    """The filters of ``GET /alarms`` (``None``: not filtered), as :func:`repo.alarms_query`
    takes them."""

    stream: str | None
    kind: str | None
    detector: str | None
    since: datetime | None
    until: datetime | None
    acknowledged: bool | None
    revised_since: datetime | None
    fleet: str | None


_ALARMS_PUBLIC = TypeAdapter(AlarmsPublic)


def alarms_body(
    connection: Connection, filters: AlarmFilters, limit: int, cursor: str | None
) -> bytes:
    """The JSON body of ``GET /alarms``: :class:`AlarmsPublic` of :func:`alarm_page` and
    :func:`alarm_count`, written by PostgreSQL (:func:`alarms_body_sql`) or else in Python."""
    if connection.dialect.name == "postgresql":
        return alarms_body_sql(connection, filters, limit, cursor)
    return alarms_body_python(connection, filters, limit, cursor)


def alarms_body_python(
    connection: Connection, filters: AlarmFilters, limit: int, cursor: str | None
) -> bytes:
    """:func:`alarms_body` validated and serialised by pydantic (any database)."""
    page = alarm_page(connection, filters, limit, cursor)
    total, exact = alarm_count(connection, filters)
    body = {"data": page.items, "count": total, "count_exact": exact}
    return _ALARMS_PUBLIC.dump_json(
        _ALARMS_PUBLIC.validate_python(body | {"next_cursor": page.next_cursor})
    )


def alarms_body_sql(
    connection: Connection, filters: AlarmFilters, limit: int, cursor: str | None
) -> bytes:
    """:func:`alarms_body` with each row's JSON written by PostgreSQL and the count taken in the
    same statement; the rows are joined as text.

    Reading, converting, validating and serialising 100 rows in Python cost most of a request's
    CPU time. The body equals :func:`alarms_body_python`'s as JSON values (numbers may be
    written differently: ``10000`` for ``10000.0``, ``1e-07`` for ``1e-7``).
    """
    statement, _ = _alarm_statements(*_shape(filters), keyed=cursor is not None, as_json=True)
    values = _page_values(filters, limit, cursor) | {"count_rows": COUNT_LIMIT + 1}
    rows = connection.execute(statement, values).all()
    # No page, no count column: count on its own (zero unless past the last page).
    total, exact = _bounded(rows[0][3]) if rows else alarm_count(connection, filters)
    next_cursor = None
    if len(rows) > limit:
        _, ts, alarm_id, _ = rows[limit - 1]
        next_cursor = repo.alarm_cursor(ts, alarm_id, "desc")
    return (
        f'{{"data":[{",".join(row[0] for row in rows[:limit])}],'
        f'"count":{total},"count_exact":{json.dumps(exact)},'
        f'"next_cursor":{json.dumps(next_cursor)}}}'
    ).encode()


def alarm_page(
    connection: Connection, filters: AlarmFilters, limit: int, cursor: str | None
) -> repo.Page[dict[str, Any]]:
    """A newest-first page of :func:`repo.alarms_query`: dicts of :data:`ALARM_COLUMNS`.

    The same rows and cursors as :func:`repo.list_alarms` (the cursors are interchangeable),
    without an ORM object per row: a list only reads columns, and building and validating ORM
    objects was half of the CPU time of a ``GET /alarms`` request. Plain dicts, because
    pydantic-core validates them twice as fast as Core rows read as attributes.
    """
    page_query, _ = _alarm_statements(*_shape(filters), keyed=cursor is not None)
    fetched = connection.execute(page_query, _page_values(filters, limit, cursor)).all()
    rows = [dict(zip(_ALARM_KEYS, row, strict=True)) for row in fetched]
    if len(rows) <= limit:
        return repo.Page(rows, None)
    last = rows[limit - 1]
    return repo.Page(rows[:limit], repo.alarm_cursor(last["ts"], last["id"], "desc"))


def alarm_count(connection: Connection, filters: AlarmFilters) -> tuple[int, bool]:
    """The :func:`bounded_count` of the alarms matching ``filters``."""
    _, count_query = _alarm_statements(*_shape(filters), keyed=False)
    values = _values(filters) | {"count_rows": COUNT_LIMIT + 1}
    return _bounded(connection.execute(count_query, values).scalar_one())


def _bounded(n: int, limit: int | None = None) -> tuple[int, bool]:
    """``(count, exact)`` of a count taken over at most ``limit + 1`` rows (default
    :data:`COUNT_LIMIT`, read at each call)."""
    limit = COUNT_LIMIT if limit is None else limit
    return min(n, limit), n <= limit


def _page_values(filters: AlarmFilters, limit: int, cursor: str | None) -> dict[str, Any]:
    values: dict[str, Any] = _values(filters) | {"page_size": limit + 1}
    if cursor is not None:
        values["after_ts"], values["after_id"] = repo.alarm_cursor_key(cursor, "desc")
    return values


def _shape(filters: AlarmFilters) -> tuple[frozenset[str], bool | None]:
    return frozenset(_values(filters)), filters["acknowledged"]


def _values(filters: AlarmFilters) -> dict[str, Any]:
    return {k: v for k, v in filters.items() if v is not None and k != "acknowledged"}


@functools.cache
def _alarm_statements(
    present: frozenset[str], acknowledged: bool | None, keyed: bool, as_json: bool = False
) -> tuple[Select[Any], Select[Any]]:
    """The page and count statements of one combination of filters, with bound parameters in
    place of the values. ``as_json`` (PostgreSQL): the page's rows are ``(json, ts, id,
    count)``, with each alarm's :class:`AlarmPublic` JSON text and the bounded count.

    Building a ``Select`` and matching its result columns to the compiled statement's cost more
    CPU than running it; one statement object per combination (at most 2**6 * 3 * 2) is built
    once and reused, so SQLAlchemy's compiled cache answers from the statement's memoised key.
    """
    # repo.alarms_query compares each column with what it is given; a bind parameter there
    # takes the column's type, so values are bound exactly as a literal would be.
    params: dict[str, Any] = {name: bindparam(name) for name in present}
    base = repo.alarms_query(**params, acknowledged=acknowledged)
    count = _bounded_count_query(base, bindparam("count_rows", type_=Integer))
    if as_json:
        page = base.with_only_columns(
            json_object(ALARM_COLUMNS), AlarmRow.ts, AlarmRow.id, count.scalar_subquery()
        )
    else:
        page = base.with_only_columns(*ALARM_COLUMNS)
    if keyed:
        after = tuple_(bindparam("after_ts", type_=AlarmRow.ts.type), bindparam("after_id"))
        page = page.where(tuple_(AlarmRow.ts, AlarmRow.id) < after)
    return page.limit(bindparam("page_size", type_=Integer)), count


def json_object(columns: tuple[InstrumentedAttribute[Any], ...]) -> ColumnElement[str]:
    """PostgreSQL: the row's columns as the JSON text pydantic would write for them (keys in
    this order; times as ``2026-11-30T12:00:00.250000Z``, or without the fraction when it is
    zero; NaN and infinities as null)."""
    pairs: list[ColumnElement[Any]] = []
    for column in columns:
        pairs += [literal_column(f"'{column.key}'"), _json_value(column)]
    return cast(func.json_build_object(*pairs), Text)


def _sql(text: str) -> ColumnElement[Any]:
    """A constant written into the statement (it is the same for every request)."""
    return literal_column(text)


def _json_value(column: InstrumentedAttribute[Any]) -> ColumnElement[Any]:
    zero, second = _sql("0"), _sql("1000000")
    if isinstance(column.type, UTCDateTime):
        utc = func.timezone(literal_column("'UTC'"), column)
        fraction = case(
            (
                func.extract("microseconds", column) % second == zero,
                literal_column("'Z'"),
            ),
            else_=func.to_char(utc, literal_column("'.US\"Z\"'")),
        )
        return func.to_char(utc, literal_column("'YYYY-MM-DD\"T\"HH24:MI:SS'")).op("||")(fraction)
    if isinstance(column.type, Float):
        special = _sql("'{NaN,Infinity,-Infinity}'::float8[]")
        return case((column == func.any(special), None), else_=column)
    return column.expression


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


#: The columns of a trace point in ``GET /streams/{name}/trace``, ordered as the response's.
TRACE_COLUMNS = tuple(getattr(TracePointRow, name) for name in TracePointPublic.model_fields)


def trace_body(
    session: Session,
    stream: str,
    detector: str | None,
    since: datetime | None,
    until: datetime | None,
    max_points: int,
) -> bytes:
    """The JSON body of ``GET /streams/{name}/trace`` (:class:`TracePublic`): written by
    PostgreSQL (:func:`trace_body_sql`), or else built in Python from
    :func:`downsampled_trace`."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        return trace_body_sql(connection, stream, detector, since, until, max_points)
    rows, stored = downsampled_trace(session, stream, detector, since, until, max_points)
    data = [TracePointPublic.model_validate(r, from_attributes=True) for r in rows]
    trace = TracePublic(
        stream=stream, data=data, count=len(data), stored=stored, downsampled=len(data) < stored
    )
    return trace.model_dump_json().encode()


def trace_body_sql(
    connection: Connection,
    stream: str,
    detector: str | None,
    since: datetime | None,
    until: datetime | None,
    max_points: int,
) -> bytes:
    """PostgreSQL: the JSON body of ``GET /streams/{name}/trace`` (:class:`TracePublic`) for the
    points :func:`downsampled_trace` keeps, in one statement, each point's JSON written by the
    server.

    The bucket peaks are ranked on two narrow columns and only the kept points are read whole:
    ranking whole rows (the ORM path) sorted every stored row of the range with all its columns,
    about 40 ms per 25 000 points, and building objects for the kept ones cost as much again.
    """
    values = {"stream": stream, "detector": detector, "since": since, "until": until}
    present = {k: v for k, v in values.items() if v is not None}
    rows = connection.execute(
        _trace_statement(frozenset(present)), present | {"max_points": max_points}
    ).all()
    stored = int(rows[0][1]) if rows else 0
    return (
        f'{{"stream":{json.dumps(stream)},"data":[{",".join(row[0] for row in rows)}],'
        f'"count":{len(rows)},"stored":{stored},"downsampled":{json.dumps(len(rows) < stored)}}}'
    ).encode()


@functools.cache
def _trace_statement(present: frozenset[str]) -> TextClause:
    """The statement of :func:`trace_body_sql` for one combination of filters: rows of
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
    point = json_object(TRACE_COLUMNS).compile(dialect=postgresql.dialect(paramstyle="named"))
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
            flags[flag.window_index].append(flag.flagged_id)
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
