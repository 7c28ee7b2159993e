"""Calibration events: a stream's reference sample, stored in the wire format's order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Select, insert, select
from sqlalchemy.orm import Session

from monitor.db.models import CalibrationEventRow, StreamRow
from monitor.streams.config import StreamConfig

__all__ = [
    "CALIBRATION_FIELDS",
    "calibration_event",
    "calibration_query",
    "feature_order",
    "store_calibration",
]

#: Calibration event fields stored in their own columns (README "Event format").
CALIBRATION_FIELDS = ("features", "prediction", "label", "logits", "embedding", "scale")


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


def store_calibration(
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
