"""The optional filters of the list queries: one condition for each filter the caller gave."""

from __future__ import annotations

from collections.abc import Callable
from operator import eq, ge, gt, lt
from typing import Any, TypeVar

from sqlalchemy import Select

__all__ = ["eq", "ge", "gt", "lt", "where_given"]

R = TypeVar("R")

#: ``(column, comparison, value)``: the condition ``comparison(column, value)``, e.g.
#: ``(AlarmRow.ts, ge, since)`` for ``AlarmRow.ts >= since``.
Filter = tuple[Any, Callable[[Any, Any], Any], Any]


def where_given(query: Select[R], *filters: Filter) -> Select[R]:
    """``query`` narrowed, in order, by each filter whose value is not ``None`` (``None``: not
    filtered). A value may be a bind parameter (the cached statements of ``GET /alarms``)."""
    for column, comparison, value in filters:
        if value is not None:
            query = query.where(comparison(column, value))
    return query
