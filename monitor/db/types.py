"""Column types shared by the models: UTC timestamps, JSON (JSONB on PostgreSQL), safe JSON text."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sqlalchemy import JSON, TIMESTAMP, BigInteger, Dialect, Integer
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator

from monitor.streams.records import MAX_STATISTIC

__all__ = ["JSONType", "UTCDateTime", "id_type", "json_dumps"]

#: JSON everywhere, JSONB on PostgreSQL (indexable, compact, validated on write).
JSONType = JSON().with_variant(JSONB(), "postgresql")

#: Auto-increment ids: BIGINT, except on SQLite where only ``INTEGER PRIMARY KEY`` is the rowid.
id_type = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """``TIMESTAMP WITH TIME ZONE`` that always hands back timezone-aware UTC datetimes.

    Naive datetimes are taken to be UTC. SQLite has no time zone type: values are stored as
    naive UTC text in one fixed format, so they compare (and sort) correctly as strings.
    """

    impl = TIMESTAMP(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def json_dumps(value: Any) -> str:
    """JSON text that PostgreSQL's JSONB accepts: no NaN/Infinity tokens, numpy types converted.

    NaN becomes ``null`` and infinities become ``±records.MAX_STATISTIC`` (as in the alarm
    record's ``to_json``); finite numbers are written exactly. Exact non-finite values belong in
    detector state (:mod:`monitor.streams.state`), not in JSON columns.

    Examples
    --------
    >>> json_dumps({"s": float("inf"), "p": float("nan"), "n": np.int64(3)})
    '{"s": 1e+300, "p": null, "n": 3}'
    """
    return json.dumps(_json_safe(value), allow_nan=False)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float | np.floating):
        number = float(value)
        if math.isfinite(number):
            return number
        return None if math.isnan(number) else math.copysign(MAX_STATISTIC, number)
    if isinstance(value, dict):
        return {_json_key(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def _json_key(key: Any) -> Any:
    return key.item() if isinstance(key, np.generic) else key
