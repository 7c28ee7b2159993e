"""Alert deliveries (``alert_outbox`` rows): newest-first keyset pages, and the retry of a dead
delivery."""

from __future__ import annotations

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from monitor.db.errors import DeliveryNotDeadError, DeliveryNotFoundError, InvalidCursorError
from monitor.db.models import AlertOutboxRow, utcnow
from monitor.db.queries._filters import eq, where_given
from monitor.db.queries._paging import INVALID, Page, check_limit, decode_cursor, encode_cursor
from monitor.db.queries._writes import begin_write

__all__ = ["alert_deliveries_query", "list_alert_deliveries", "retry_alert_delivery"]


def alert_deliveries_query(
    *, status: str | None = None, receiver: str | None = None
) -> Select[AlertOutboxRow]:
    """Alert deliveries (``alert_outbox`` rows) matching the filters, newest first (by id)."""
    query = where_given(
        select(AlertOutboxRow),
        (AlertOutboxRow.status, eq, status),
        (AlertOutboxRow.receiver, eq, receiver),
    )
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
    check_limit(limit)
    query = alert_deliveries_query(status=status, receiver=receiver)
    if cursor is not None:
        value = decode_cursor(cursor, "deliveries", "desc").get("id")
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidCursorError(INVALID)
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
    begin_write(session)
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

