"""Streams: registration, versions of a stream's configuration, deletion.

Write executors commit their own transaction.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic import ValidationError
from sqlalchemy import CursorResult, Select, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from monitor.db.errors import StreamChangedError, StreamExistsError, StreamNotFoundError
from monitor.db.models import CalibrationEventRow, StreamRow
from monitor.db.queries._writes import begin_write
from monitor.db.queries.calibration import (
    CALIBRATION_FIELDS,
    calibration_event,
    calibration_query,
    feature_order,
    store_calibration,
)
from monitor.streams.config import StreamConfig

__all__ = [
    "create_stream",
    "delete_stream",
    "get_stream",
    "list_streams",
    "new_stream_version",
    "register_stream",
    "streams_query",
    "update_stream",
]


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
    begin_write(session)
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
    store_calibration(session, row, config, calibration)
    session.commit()
    return row


def update_stream(
    session: Session,
    config: StreamConfig,
    calibration: Sequence[Mapping[str, Any]] | None = None,
) -> StreamRow:
    """Replace a registered stream's configuration (and, if given, its calibration), store it as
    the next version, and commit."""
    begin_write(session)
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
    begin_write(session)
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
        store_calibration(session, row, config, calibration)


def _same(
    session: Session,
    row: StreamRow,
    config: StreamConfig,
    calibration: Sequence[Mapping[str, Any]] | None,
) -> bool:
    """Whether ``config`` and ``calibration`` are what ``row`` stores. Where the calibration
    came from (a file path or inline rows) does not count, only the rows do. The stored
    configuration is compared as it validates today: one written before a key with a default
    existed (``data_quality``, ...) is the same configuration with that default."""
    def settings(dumped: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in dumped.items() if k != "calibration"}

    stored_config: Mapping[str, Any] = row.config
    with contextlib.suppress(ValidationError):  # a stored one today's rules refuse: as stored
        stored_config = StreamConfig.model_validate(row.config).model_dump(mode="json")
    if settings(stored_config) != settings(config.model_dump(mode="json")):
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
    begin_write(session)
    result = session.execute(delete(StreamRow).where(StreamRow.name == name))
    deleted = cast(CursorResult[Any], result).rowcount
    if not deleted:
        session.rollback()
        raise StreamNotFoundError(f"no stream named {name!r}")
    session.commit()
