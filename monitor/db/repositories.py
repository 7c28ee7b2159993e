"""Queries of the service's tables.

Functions named ``*_query`` return ``Select`` statements that callers can extend (extra filters,
``.limit()``, ``func.count()`` over a subquery); the small executors next to them run those
statements. Write executors (stream CRUD, acknowledgement) commit their own transaction.

Time ranges are half-open everywhere: ``since`` is inclusive, ``until`` exclusive.

Keyset pagination: a page ends with an opaque ``next_cursor`` (URL-safe base64 of the last row's
sort key, a dot, and an HMAC-SHA256 tag of that text); passing it back returns the rows strictly
after that key, so concurrent inserts never make a page skip or repeat a row that already existed.
A cursor whose tag does not match (edited, forged, or signed with another key) is refused; the
key is ``MONITOR_CURSOR_SECRET`` (:func:`set_cursor_key`), else a built-in one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, cast

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Select,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    tuple_,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import InstrumentedAttribute, Session

from monitor.db.engine import SQLITE_BEGIN
from monitor.db.errors import (
    AlarmNotFoundError,
    DeliveryNotDeadError,
    DeliveryNotFoundError,
    InvalidCursorError,
    StreamChangedError,
    StreamExistsError,
    StreamNotFoundError,
)
from monitor.db.models import (
    AlarmRevisionRow,
    AlarmRow,
    AlertOutboxRow,
    CalibrationEventRow,
    CheckpointRow,
    DeadLetterRow,
    FleetRow,
    OODFlagRow,
    OODWindowRow,
    PerformanceWindowRow,
    SourceOffsetRow,
    StreamRow,
    TracePointRow,
    source_key,
    utcnow,
)
from monitor.streams.config import StreamConfig

__all__ = [
    "CALIBRATION_FIELDS",
    "PERFORMANCE_FIELDS",
    "Page",
    "acknowledge_alarm",
    "alarm_cursor",
    "alarm_cursor_key",
    "alarm_revisions_query",
    "alarms_query",
    "alert_deliveries_query",
    "calibration_event",
    "calibration_query",
    "checkpoint_query",
    "count",
    "create_stream",
    "dead_letters_query",
    "decode_cursor",
    "delete_stream",
    "encode_cursor",
    "feature_order",
    "fleets_query",
    "get_alarm",
    "get_stream",
    "list_alarms",
    "list_alert_deliveries",
    "list_dead_letters",
    "list_ood_windows",
    "list_streams",
    "list_traces",
    "new_stream_version",
    "offsets_query",
    "ood_flags_query",
    "ood_windows_query",
    "performance_windows",
    "performance_windows_query",
    "register_stream",
    "retry_alert_delivery",
    "set_cursor_key",
    "source_key",
    "streams_query",
    "traces_query",
    "update_stream",
]

T = TypeVar("T")
Order = Literal["asc", "desc"]

#: Calibration event fields stored in their own columns (README "Event format").
CALIBRATION_FIELDS = ("features", "prediction", "label", "logits", "embedding", "scale")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of rows and the cursor of the next page (``None`` on the last page)."""

    items: list[T]
    next_cursor: str | None


def count(session: Session, query: Select[Any]) -> int:
    """Number of rows ``query`` would return (ordering and limits ignored)."""
    inner = query.order_by(None).limit(None).offset(None).subquery()
    return session.execute(select(func.count()).select_from(inner)).scalar_one()


# --- cursors ----------------------------------------------------------------------------------


#: Key of the cursors' tags when no secret is configured: a tag then detects an edited or
#: truncated cursor; forging one takes this module's source, which a configured secret denies.
_BUILT_IN_CURSOR_KEY = b"monitor pagination cursor v1"
_cursor_key = _BUILT_IN_CURSOR_KEY
_TAG_BYTES = 16
_INVALID = "cursor is not valid: pass the next_cursor of a page"


def set_cursor_key(secret: str) -> None:
    """Sign cursors with ``secret`` from now on (empty: the built-in key).

    Every process that serves the same clients must use the same secret (``monitor serve``
    passes ``MONITOR_CURSOR_SECRET`` to its workers); changing it invalidates open cursors."""
    global _cursor_key
    _cursor_key = secret.encode() if secret else _BUILT_IN_CURSOR_KEY


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _tag(body: str) -> str:
    digest = hmac.new(_cursor_key, body.encode(), hashlib.sha256).digest()
    return _b64encode(digest[:_TAG_BYTES])


def encode_cursor(payload: Mapping[str, Any]) -> str:
    """Opaque, URL-safe, signed cursor text for a sort key."""
    text = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    body = _b64encode(text.encode())
    return f"{body}.{_tag(body)}"


def decode_cursor(cursor: str, kind: str, order: Order) -> dict[str, Any]:
    """Sort key of a cursor made by :func:`encode_cursor` for the same kind of query and order.

    Raises :class:`InvalidCursorError` if the tag does not match (the cursor was edited, forged
    or signed with another key) or the cursor is of another query."""
    body, dot, tag = cursor.partition(".")
    if not dot or not hmac.compare_digest(tag.encode(), _tag(body).encode()):
        raise InvalidCursorError(_INVALID)
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursorError(_INVALID) from exc
    if not isinstance(payload, dict) or payload.get("k") != kind or payload.get("o") != order:
        raise InvalidCursorError(
            f"cursor does not belong to a {kind} query in {order} order: pass the next_cursor "
            "of a page of the same query"
        )
    return payload


def _after(
    keys: Sequence[InstrumentedAttribute[Any]], values: Sequence[Any], order: Order
) -> ColumnElement[bool]:
    # Row-value comparison (PostgreSQL, SQLite >= 3.15) walks the composite index directly. The
    # literals take the columns' types, so timestamps are bound exactly as they were stored.
    right = tuple_(*(literal(v, type_=k.type) for k, v in zip(keys, values, strict=True)))
    return tuple_(*keys) > right if order == "asc" else tuple_(*keys) < right


def _check_order(order: str) -> None:
    if order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")


def _begin_write(session: Session) -> None:
    """Start a write transaction; on SQLite take the write lock up front (waiting for it under
    the busy timeout) instead of failing when a read transaction tries to upgrade."""
    if not session.in_transaction():
        session.connection(execution_options={SQLITE_BEGIN: "IMMEDIATE"})


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")


# --- alarms -----------------------------------------------------------------------------------


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
    _check_order(order)
    query = select(AlarmRow)
    if stream is not None:
        query = query.where(AlarmRow.stream == stream)
    if fleet is not None:
        query = query.where(AlarmRow.fleet == fleet)
    if kind is not None:
        query = query.where(AlarmRow.kind == kind)
    if detector is not None:
        query = query.where(AlarmRow.detector == detector)
    if since is not None:
        query = query.where(AlarmRow.ts >= since)
    if until is not None:
        query = query.where(AlarmRow.ts < until)
    if revised_since is not None:
        query = query.where(AlarmRow.revised_at >= revised_since)
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
    _check_limit(limit)
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
        after = alarm_cursor_key(cursor, order)
        query = query.where(_after((AlarmRow.ts, AlarmRow.id), after, order))
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
        raise InvalidCursorError(_INVALID) from exc
    if set(key) != {"k", "o", "ts", "id"} or ts.tzinfo is None or not isinstance(alarm_id, str):
        raise InvalidCursorError(_INVALID)
    return ts, alarm_id


def get_alarm(session: Session, alarm_id: str) -> AlarmRow | None:
    """The alarm with this id, or ``None``."""
    return session.get(AlarmRow, alarm_id)


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
    """Mark an alarm acknowledged and commit; the first acknowledgement is kept.

    Raises
    ------
    AlarmNotFoundError
        No alarm has this id.
    """
    _begin_write(session)
    alarm = session.get(AlarmRow, alarm_id, with_for_update=True)
    if alarm is None:
        session.rollback()
        raise AlarmNotFoundError(f"no alarm with id {alarm_id!r}")
    if alarm.acknowledged_at is None:
        alarm.acknowledged_at = at or utcnow()
        alarm.acknowledged_by = by
    session.commit()
    return alarm


# --- traces -----------------------------------------------------------------------------------


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
    query = select(TracePointRow).where(TracePointRow.stream == stream)
    if detector is not None:
        query = query.where(TracePointRow.detector == detector)
    if since_index is not None:
        query = query.where(TracePointRow.event_index >= since_index)
    if until_index is not None:
        query = query.where(TracePointRow.event_index < until_index)
    if since is not None:
        query = query.where(TracePointRow.ts >= since)
    if until is not None:
        query = query.where(TracePointRow.ts < until)
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
    _check_limit(limit)
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
            after = (int(key["i"]), str(key["d"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidCursorError("cursor is not valid: pass the next_cursor of a page") from exc
        keys = (TracePointRow.event_index, TracePointRow.detector)
        query = query.where(_after(keys, after, "asc"))
    rows = list(session.scalars(query.limit(limit + 1)))
    if len(rows) <= limit:
        return Page(rows, None)
    last = rows[limit - 1]
    token = encode_cursor({"k": "traces", "o": "asc", "i": last.event_index, "d": last.detector})
    return Page(rows[:limit], token)


# --- OOD ----------------------------------------------------------------------------------------


def ood_windows_query(
    stream: str,
    *,
    since_index: int | None = None,
    until_index: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Select[OODWindowRow]:
    """A stream's OOD windows by window index; ``*_index`` bound the windows' event ranges."""
    query = select(OODWindowRow).where(OODWindowRow.stream == stream)
    if since_index is not None:
        query = query.where(OODWindowRow.end_index > since_index)
    if until_index is not None:
        query = query.where(OODWindowRow.start_index < until_index)
    if since is not None:
        query = query.where(OODWindowRow.ts >= since)
    if until is not None:
        query = query.where(OODWindowRow.ts < until)
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
    _check_limit(limit)
    query = ood_windows_query(stream)
    if after_window is not None:
        query = query.where(OODWindowRow.window_index > after_window)
    windows = list(session.scalars(query.limit(limit)))
    flags: dict[int, list[str]] = {w.window_index: [] for w in windows}
    if windows:
        for flag in session.scalars(ood_flags_query(stream, list(flags))):
            flags[flag.window_index].append(flag.flagged_id)
    return [(w, tuple(flags[w.window_index])) for w in windows]


# --- model performance --------------------------------------------------------------------------

#: The keys of each dict :func:`performance_windows` returns.
PERFORMANCE_FIELDS: tuple[str, ...] = (
    "stream", "window_index", "start_index", "end_index", "ts", "n", "metrics",
)


def performance_windows_query(
    stream: str, *, since: datetime | None = None, until: datetime | None = None
) -> Select[PerformanceWindowRow]:
    """A stream's performance windows with ``since <= ts < until``, by window index."""
    query = select(PerformanceWindowRow).where(PerformanceWindowRow.stream == stream)
    if since is not None:
        query = query.where(PerformanceWindowRow.ts >= since)
    if until is not None:
        query = query.where(PerformanceWindowRow.ts < until)
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
    _check_limit(limit)
    query = performance_windows_query(stream, since=since, until=until)
    query = query.order_by(None).order_by(PerformanceWindowRow.window_index.desc()).limit(limit)
    rows = list(session.scalars(query))[::-1]
    return [{name: getattr(row, name) for name in PERFORMANCE_FIELDS} for row in rows]


# --- streams ------------------------------------------------------------------------------------


def streams_query() -> Select[StreamRow]:
    """Registered streams by name."""
    return select(StreamRow).order_by(StreamRow.name)


def list_streams(session: Session) -> list[StreamRow]:
    """Every registered stream, by name."""
    return list(session.scalars(streams_query()))


def get_stream(session: Session, name: str) -> StreamRow | None:
    """The registered stream called ``name``, or ``None``."""
    return session.get(StreamRow, name)


def create_stream(
    session: Session,
    config: StreamConfig,
    calibration: Sequence[Mapping[str, Any]] | None = None,
) -> StreamRow:
    """Register a stream with its calibration events and commit.

    Parameters
    ----------
    config
        The stream's configuration, stored as ``config.model_dump(mode="json")``.
    calibration
        Calibration events in the wire format (``features``, ``prediction``, ``label`` and the
        optional ``id``, ``logits``, ``embedding``); defaults to ``config.calibration`` when that
        is an inline list, else none.

    Raises
    ------
    StreamExistsError
        A stream with this name is already registered.
    """
    exists = StreamExistsError(f"stream {config.name!r} already exists; update it instead")
    _begin_write(session)
    if session.get(StreamRow, config.name) is not None:
        session.rollback()
        raise exists
    row = StreamRow(
        name=config.name, task=config.task, config=config.model_dump(mode="json"), version=1
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError as exc:  # registered concurrently since the check above
        session.rollback()
        raise exists from exc
    _store_calibration(session, row, config, calibration)
    session.commit()
    return row


def update_stream(
    session: Session,
    config: StreamConfig,
    calibration: Sequence[Mapping[str, Any]] | None = None,
) -> StreamRow:
    """Replace a registered stream's configuration (and, if given, its calibration), store it as
    the next version, and commit."""
    _begin_write(session)
    row = session.get(StreamRow, config.name, with_for_update=True)
    if row is None:
        session.rollback()
        raise StreamNotFoundError(f"no stream named {config.name!r}; create it first")
    _replace(session, row, config, calibration)
    session.commit()
    return row


def register_stream(
    session: Session, config: StreamConfig, calibration: Sequence[Mapping[str, Any]] | None
) -> tuple[StreamRow, bool]:
    """Register a stream unless it is registered already, and commit; ``(row, created)``.

    A name already registered with the same configuration and calibration events is left as it
    is (``created`` is false): registering is idempotent. With another configuration it is
    refused: changing a stream is :func:`new_stream_version`'s job.

    Raises
    ------
    StreamChangedError
        The name is registered with another configuration or calibration (nothing changes).
    """
    try:
        return create_stream(session, config, calibration), True
    except StreamExistsError:
        pass
    with session.begin():
        row = session.get(StreamRow, config.name)
        same = row is not None and _same(session, row, config, calibration)
    if row is None:  # deleted since: register it after all
        return register_stream(session, config, calibration)
    if not same:
        raise StreamChangedError(config.name, row.version)
    return row, False


def new_stream_version(
    session: Session, config: StreamConfig, calibration: Sequence[Mapping[str, Any]] | None
) -> tuple[StreamRow, bool]:
    """Store a changed configuration (and calibration) of a registered stream as its next
    version, and commit; ``(row, changed)``. The same configuration again stores nothing.

    Raises
    ------
    StreamNotFoundError
        No stream of that name is registered.
    """
    _begin_write(session)
    row = session.get(StreamRow, config.name, with_for_update=True)
    if row is None:
        session.rollback()
        raise StreamNotFoundError(f"no stream named {config.name!r}; create it first")
    if _same(session, row, config, calibration):
        session.rollback()
        return row, False
    _replace(session, row, config, calibration)
    session.commit()
    return row, True


def _replace(
    session: Session,
    row: StreamRow,
    config: StreamConfig,
    calibration: Sequence[Mapping[str, Any]] | None,
) -> None:
    row.task = config.task
    row.config = config.model_dump(mode="json")
    row.version = row.version + 1
    if calibration is not None:
        session.execute(delete(CalibrationEventRow).where(CalibrationEventRow.stream == row.name))
        _store_calibration(session, row, config, calibration)


def _same(
    session: Session,
    row: StreamRow,
    config: StreamConfig,
    calibration: Sequence[Mapping[str, Any]] | None,
) -> bool:
    """Whether ``config`` and ``calibration`` are what ``row`` stores. Where the calibration
    came from (a file path or inline rows) does not count, only the rows do."""
    def settings(dumped: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in dumped.items() if k != "calibration"}

    if settings(row.config) != settings(config.model_dump(mode="json")):
        return False
    if calibration is None:
        return True
    if row.feature_names is None and feature_order(calibration) is not None:
        return False  # an order an upgrade could not recover: the next version stores it
    stored = [calibration_event(r) for r in session.scalars(calibration_query(row.name))]
    given = [
        {k: event.get(k) for k in ("id", *CALIBRATION_FIELDS) if event.get(k) is not None}
        for event in calibration
    ]
    return bool(json.loads(json.dumps(given)) == stored)


def delete_stream(session: Session, name: str) -> None:
    """Delete a stream's configuration and calibration events and commit; results are kept."""
    _begin_write(session)
    result = session.execute(delete(StreamRow).where(StreamRow.name == name))
    deleted = cast(CursorResult[Any], result).rowcount
    if not deleted:
        session.rollback()
        raise StreamNotFoundError(f"no stream named {name!r}")
    session.commit()


def calibration_query(stream: str | None = None) -> Select[CalibrationEventRow]:
    """A stream's (or every stream's) calibration events, by stream, in their original order."""
    query = select(CalibrationEventRow)
    if stream is not None:
        query = query.where(CalibrationEventRow.stream == stream)
    return query.order_by(CalibrationEventRow.stream, CalibrationEventRow.idx)


def feature_order(events: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """The feature names of calibration events in wire format, in the order the first event's
    object lists them (as given, before any database stored it); ``None`` for list features."""
    features = events[0].get("features") if events else None
    return [str(name) for name in features] if isinstance(features, Mapping) else None


def calibration_event(row: CalibrationEventRow) -> dict[str, Any]:
    """A stored calibration event back in the wire format (absent optional fields omitted)."""
    event = {} if row.event_id is None else {"id": row.event_id}
    event |= {name: getattr(row, name) for name in CALIBRATION_FIELDS}
    return {k: v for k, v in event.items() if v is not None}


def _store_calibration(
    session: Session,
    stream: StreamRow,
    config: StreamConfig,
    events: Sequence[Mapping[str, Any]] | None,
) -> None:
    """Store the calibration events and, for object features, their order as a list
    (``streams.feature_names``): a JSON object read back from JSONB has its keys in JSONB's own
    order, so the order is never taken from the stored rows."""
    if events is None:
        events = config.calibration if isinstance(config.calibration, list) else []
    stream.feature_names = feature_order(events)
    rows = [
        {"stream": config.name, "idx": i, "event_id": _calibration_id(event.get("id"))}
        | {name: event.get(name) for name in CALIBRATION_FIELDS}
        for i, event in enumerate(events)
    ]
    if rows:
        session.execute(insert(CalibrationEventRow), rows)


def _calibration_id(value: Any) -> str | None:
    """A calibration row's id as a stored string: an integer id as its decimal string, as the
    wire format reads it (the rows were validated as events before)."""
    return None if value is None else str(value)


# --- dead letters, offsets, checkpoints -------------------------------------------------------


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
    if stream is not None:
        query = query.where(DeadLetterRow.stream == stream)
    if since is not None:
        query = query.where(DeadLetterRow.ts >= since)
    if until is not None:
        query = query.where(DeadLetterRow.ts < until)
    return query.order_by(DeadLetterRow.ts.desc(), DeadLetterRow.id.desc())


def list_dead_letters(
    session: Session,
    *,
    source: str | None = None,
    stream: str | None = None,
    limit: int = 100,
) -> list[DeadLetterRow]:
    """The ``limit`` newest dead letters matching the filters."""
    _check_limit(limit)
    query = dead_letters_query(source=source, stream=stream)
    return list(session.scalars(query.limit(limit)))


def offsets_query(source: str) -> Select[SourceOffsetRow]:
    """Stored offsets of a source's partitions (``source``: its whole name, of any length)."""
    return (
        select(SourceOffsetRow)
        .where(SourceOffsetRow.source == source_key(source))
        .order_by(SourceOffsetRow.partition)
    )


def checkpoint_query(stream: str) -> Select[CheckpointRow]:
    """A stream's checkpoint row."""
    return select(CheckpointRow).where(CheckpointRow.stream == stream)


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


# --- alert deliveries ---------------------------------------------------------------------------


def alert_deliveries_query(
    *, status: str | None = None, receiver: str | None = None
) -> Select[AlertOutboxRow]:
    """Alert deliveries (``alert_outbox`` rows) matching the filters, newest first (by id)."""
    query = select(AlertOutboxRow)
    if status is not None:
        query = query.where(AlertOutboxRow.status == status)
    if receiver is not None:
        query = query.where(AlertOutboxRow.receiver == receiver)
    return query.order_by(AlertOutboxRow.id.desc())


def list_alert_deliveries(
    session: Session,
    *,
    status: str | None = None,
    receiver: str | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> Page[AlertOutboxRow]:
    """One newest-first page of :func:`alert_deliveries_query` (keyset on the id)."""
    _check_limit(limit)
    query = alert_deliveries_query(status=status, receiver=receiver)
    if cursor is not None:
        value = decode_cursor(cursor, "deliveries", "desc").get("id")
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidCursorError(_INVALID)
        query = query.where(AlertOutboxRow.id < value)
    rows = list(session.scalars(query.limit(limit + 1)))
    if len(rows) <= limit:
        return Page(rows, None)
    token = encode_cursor({"k": "deliveries", "o": "desc", "id": rows[limit - 1].id})
    return Page(rows[:limit], token)


def retry_alert_delivery(session: Session, delivery_id: int) -> AlertOutboxRow:
    """Queue a dead delivery again, due now, with a fresh ``max_attempts`` attempts; commits.

    Raises :class:`DeliveryNotFoundError` (no such id) or :class:`DeliveryNotDeadError`.
    """
    _begin_write(session)
    row = session.get(AlertOutboxRow, delivery_id, with_for_update=True)
    if row is None:
        session.rollback()
        raise DeliveryNotFoundError(f"no alert delivery with id {delivery_id}")
    if row.status != "dead":
        status = row.status
        session.rollback()
        raise DeliveryNotDeadError(
            f"alert delivery {delivery_id} is {status}: only dead deliveries can be retried"
        )
    row.status = "pending"
    row.attempt_limit = row.attempts + row.max_attempts
    row.next_attempt_at = utcnow()
    session.commit()
    return row


def fleets_query() -> Select[FleetRow]:
    """Every stored fleet, by name."""
    return select(FleetRow).order_by(FleetRow.name)
