"""PostgreSQL: rows written as JSON text by the server, as pydantic would write them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Float, Text, case, cast, func, literal_column
from sqlalchemy.orm import InstrumentedAttribute

from monitor.db.types import UTCDateTime

__all__ = ["json_object"]


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
