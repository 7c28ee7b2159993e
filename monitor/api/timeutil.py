"""Time-range query parameters: ISO 8601 text, naive times are UTC, ``since`` before ``until``.

A plain date (``2026-11-30``) means midnight UTC of that day, for either bound.

The parameters are declared as strings with a pattern (not pydantic datetimes), so that what the
OpenAPI schema promises is exactly what is accepted: pydantic would also take numbers as Unix
times, which the schema cannot say.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Query
from fastapi.exceptions import RequestValidationError
from pydantic import AfterValidator

__all__ = ["ISO_8601", "RevisedSince", "Since", "Until", "check_range"]

#: A date, or a date and time with optional seconds, fraction and UTC offset (naive times and
#: plain dates are taken as UTC; a date is its midnight).
ISO_8601 = (
    r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?)?$"
)


def _iso_text(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(ISO_8601, value):
        raise ValueError(
            "expected an ISO 8601 date and time such as 2026-11-30T12:00:00Z "
            "(seconds, fraction and UTC offset optional) or a date such as 2026-11-30 "
            "(midnight UTC)"
        )
    return value


# The pattern is documented in the schema and checked by _iso_text, whose message says what to
# send (pydantic's own pattern error would only repeat the regular expression).
Since = Annotated[
    str | None,
    Query(
        json_schema_extra={"pattern": ISO_8601},
        examples=["2026-11-30T12:00:00Z"],
        description="ISO 8601 date and time, inclusive; naive = UTC; a date = its midnight UTC.",
    ),
    AfterValidator(_iso_text),
]
RevisedSince = Annotated[
    str | None,
    Query(
        json_schema_extra={"pattern": ISO_8601},
        examples=["2026-11-30T12:00:00Z"],
        description="Only alarms revised at or after this ISO 8601 time (`revised_at`), "
        "whatever their `ts`; naive = UTC; a date = its midnight UTC.",
    ),
    AfterValidator(_iso_text),
]
Until = Annotated[
    str | None,
    Query(
        json_schema_extra={"pattern": ISO_8601},
        examples=["2026-12-01T00:00:00Z"],
        description="ISO 8601 date and time, exclusive; naive = UTC; a date = its midnight UTC.",
    ),
    AfterValidator(_iso_text),
]


def check_range(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    """Both bounds as UTC datetimes; 422 if one is not a real time or the range is empty.

    Examples
    --------
    >>> check_range("2026-01-01T00:00", None)[0].isoformat()
    '2026-01-01T00:00:00+00:00'
    """
    since_utc, until_utc = _parse(since, "since"), _parse(until, "until")
    if since_utc is not None and until_utc is not None and since_utc >= until_utc:
        raise RequestValidationError(
            [
                _error(
                    "until",
                    until,
                    f"'until' ({until_utc.isoformat()}) must be later than 'since' "
                    f"({since_utc.isoformat()})",
                )
            ]
        )
    return since_utc, until_utc


def _parse(text: str | None, name: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise RequestValidationError(
            [_error(name, text, f"'{name}' is not a valid date and time: {exc}")]
        ) from None


def _error(name: str, value: str | None, message: str) -> dict[str, object]:
    return {"type": "value_error", "loc": ("query", name), "msg": message, "input": value}
