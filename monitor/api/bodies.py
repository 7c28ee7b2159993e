"""The JSON bodies of ``GET /alarms`` and ``GET /streams/{name}/trace``: on PostgreSQL each row's
JSON is written by the server and the rows are joined as text; elsewhere pydantic validates and
serialises them. The rows come from :mod:`monitor.db.queries`, with the columns of the
response's schema."""

from __future__ import annotations

import json
from datetime import datetime

from pydantic import TypeAdapter
from sqlalchemy import Connection
from sqlalchemy.orm import Session

from monitor.api.schemas import AlarmPublic, AlarmsPublic, TracePointPublic, TracePublic
from monitor.db import queries
from monitor.db.queries import AlarmFilters

__all__ = [
    "ALARM_KEYS",
    "TRACE_KEYS",
    "alarms_body",
    "alarms_body_python",
    "alarms_body_sql",
    "trace_body",
    "trace_body_sql",
]

#: The columns ``GET /alarms`` shows, named and ordered as the fields of :class:`AlarmPublic`.
ALARM_KEYS = tuple(AlarmPublic.model_fields)
#: The columns of a trace point in ``GET /streams/{name}/trace``, ordered as the response's.
TRACE_KEYS = tuple(TracePointPublic.model_fields)

_ALARMS_PUBLIC = TypeAdapter(AlarmsPublic)


def alarms_body(
    connection: Connection, filters: AlarmFilters, limit: int, cursor: str | None
) -> bytes:
    """The JSON body of ``GET /alarms``: :class:`AlarmsPublic` of
    :func:`~monitor.db.queries.alarm_page` and :func:`~monitor.db.queries.alarm_count`,
    written by PostgreSQL (:func:`alarms_body_sql`) or else in Python."""
    if connection.dialect.name == "postgresql":
        return alarms_body_sql(connection, filters, limit, cursor)
    return alarms_body_python(connection, filters, limit, cursor)


def alarms_body_python(
    connection: Connection, filters: AlarmFilters, limit: int, cursor: str | None
) -> bytes:
    """:func:`alarms_body` validated and serialised by pydantic (any database)."""
    page = queries.alarm_page(connection, filters, limit, cursor, ALARM_KEYS)
    total, exact = queries.alarm_count(connection, filters)
    body = {"data": page.items, "count": total, "count_exact": exact}
    return _ALARMS_PUBLIC.dump_json(
        _ALARMS_PUBLIC.validate_python(body | {"next_cursor": page.next_cursor})
    )


def alarms_body_sql(
    connection: Connection, filters: AlarmFilters, limit: int, cursor: str | None
) -> bytes:
    """:func:`alarms_body` with each row's JSON written by PostgreSQL and the count taken in the
    same statement (:func:`~monitor.db.queries.alarm_json_page`); the rows are joined as text.

    Reading, converting, validating and serialising 100 rows in Python cost most of a request's
    CPU time. The body equals :func:`alarms_body_python`'s as JSON values (numbers may be
    written differently: ``10000`` for ``10000.0``, ``1e-07`` for ``1e-7``).
    """
    page, (total, exact) = queries.alarm_json_page(connection, filters, limit, cursor, ALARM_KEYS)
    return (
        f'{{"data":[{",".join(page.items)}],'
        f'"count":{total},"count_exact":{json.dumps(exact)},'
        f'"next_cursor":{json.dumps(page.next_cursor)}}}'
    ).encode()


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
    :func:`~monitor.db.queries.downsampled_trace`."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        return trace_body_sql(connection, stream, detector, since, until, max_points)
    rows, stored = queries.downsampled_trace(session, stream, detector, since, until, max_points)
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
    points :func:`~monitor.db.queries.downsampled_trace` keeps, each point's JSON written by the
    server (:func:`~monitor.db.queries.trace_json_points`)."""
    points, stored = queries.trace_json_points(
        connection, stream, detector, since, until, max_points, TRACE_KEYS
    )
    return (
        f'{{"stream":{json.dumps(stream)},"data":[{",".join(points)}],'
        f'"count":{len(points)},"stored":{stored},'
        f'"downsampled":{json.dumps(len(points) < stored)}}}'
    ).encode()
