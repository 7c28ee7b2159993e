"""Pages, counts and keyset cursors shared by the queries of every resource.

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
from typing import Any, Generic, Literal, TypeVar

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Connection,
    Select,
    func,
    literal,
    select,
    tuple_,
)
from sqlalchemy.orm import InstrumentedAttribute, Session

from monitor.db.errors import InvalidCursorError

__all__ = [
    "COUNT_LIMIT",
    "INVALID",
    "Order",
    "Page",
    "after",
    "bounded",
    "bounded_count",
    "bounded_count_query",
    "check_limit",
    "check_order",
    "count",
    "decode_cursor",
    "encode_cursor",
    "set_cursor_key",
]

T = TypeVar("T")
Order = Literal["asc", "desc"]

#: Lists count matching rows exactly up to this many; beyond it the count is this lower bound.
#: Counting every one of millions of rows would make a page cost O(table) instead of O(page).
#: Read at each call (through this module), so a test may lower it.
COUNT_LIMIT = 10_000

#: The message of a cursor that does not decode to a sort key.
INVALID = "cursor is not valid: pass the next_cursor of a page"


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of rows and the cursor of the next page (``None`` on the last page)."""

    items: list[T]
    next_cursor: str | None


def count(session: Session, query: Select[Any]) -> int:
    """Number of rows ``query`` would return (ordering and limits ignored)."""
    inner = query.order_by(None).limit(None).offset(None).subquery()
    return session.execute(select(func.count()).select_from(inner)).scalar_one()


def bounded_count(
    session: Session | Connection, query: Select[Any], limit: int | None = None
) -> tuple[int, bool]:
    """``(n, exact)``: the rows ``query`` matches if at most ``limit`` (default
    :data:`COUNT_LIMIT`), else ``(limit, False)``."""
    limit = COUNT_LIMIT if limit is None else limit
    return bounded(session.execute(bounded_count_query(query, limit + 1)).scalar_one(), limit)


def bounded_count_query(query: Select[Any], rows: int | BindParameter[int]) -> Select[Any]:
    """The count of the rows of ``query``, counting no more than ``rows``."""
    # Only a constant is selected, so PostgreSQL can answer from the index (index-only scan).
    ones = query.with_only_columns(literal(1), maintain_column_froms=True)
    return select(func.count()).select_from(ones.order_by(None).limit(rows).subquery())


def bounded(n: int, limit: int | None = None) -> tuple[int, bool]:
    """``(count, exact)`` of a count taken over at most ``limit + 1`` rows (default
    :data:`COUNT_LIMIT`, read at each call)."""
    limit = COUNT_LIMIT if limit is None else limit
    return min(n, limit), n <= limit


def check_order(order: str) -> None:
    if order not in ("asc", "desc"):
        raise ValueError(f"order must be 'asc' or 'desc', got {order!r}")


def check_limit(limit: int) -> None:
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")


def after(
    keys: Sequence[InstrumentedAttribute[Any]], values: Sequence[Any], order: Order
) -> ColumnElement[bool]:
    """The rows strictly after the sort key ``values`` of ``keys`` in ``order``."""
    # Row-value comparison (PostgreSQL, SQLite >= 3.15) walks the composite index directly. The
    # literals take the columns' types, so timestamps are bound exactly as they were stored.
    right = tuple_(*(literal(v, type_=k.type) for k, v in zip(keys, values, strict=True)))
    return tuple_(*keys) > right if order == "asc" else tuple_(*keys) < right


# --- cursors ----------------------------------------------------------------------------------


#: Key of the cursors' tags when no secret is configured: a tag then detects an edited or
#: truncated cursor; forging one takes this module's source, which a configured secret denies.
_BUILT_IN_CURSOR_KEY = b"monitor pagination cursor v1"
_cursor_key = _BUILT_IN_CURSOR_KEY
_TAG_BYTES = 16


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
        raise InvalidCursorError(INVALID)
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursorError(INVALID) from exc
    if not isinstance(payload, dict) or payload.get("k") != kind or payload.get("o") != order:
        raise InvalidCursorError(
            f"cursor does not belong to a {kind} query in {order} order: pass the next_cursor "
            "of a page of the same query"
        )
    return payload
