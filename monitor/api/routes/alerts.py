"""``/alerts/deliveries``: the alert outbox (pending, delivered and dead deliveries), and retrying
a dead one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Security

from monitor.alerts.routing import RECEIVER_NAME_PATTERN
from monitor.api.deps import Cursor, PageSize, ReadSessionDep, SessionDep, bearer
from monitor.api.errors import READ_ERRORS, WRITE_ERRORS, responses
from monitor.api.schemas import AlertDeliveriesPublic, AlertDeliveryPublic, DeliveryStatus
from monitor.db import queries

router = APIRouter(
    prefix="/alerts", tags=["alerts"], dependencies=[Security(bearer)], responses=READ_ERRORS
)

DeliveryId = Annotated[int, Path(ge=1, le=2**63 - 1, description="The delivery's id.")]


@router.get(
    "/deliveries", summary="List alert deliveries, newest first",
    response_model=AlertDeliveriesPublic,
)
def list_deliveries(
    session: ReadSessionDep,
    status: Annotated[
        DeliveryStatus | None, Query(description="Only deliveries in this state.")
    ] = None,
    receiver: Annotated[
        str | None, Query(pattern=RECEIVER_NAME_PATTERN, description="Only this receiver.")
    ] = None,
    limit: PageSize = 100,
    cursor: Cursor = None,
) -> AlertDeliveriesPublic:
    """Deliveries of alarms to the configured receivers; `status=dead` lists the ones given up
    after their last attempt (each with its last HTTP status or error)."""
    query = queries.alert_deliveries_query(status=status, receiver=receiver)
    total, exact = queries.bounded_count(session, query)
    page = queries.list_alert_deliveries(
        session, status=status, receiver=receiver, limit=limit, cursor=cursor
    )
    return AlertDeliveriesPublic(
        data=[AlertDeliveryPublic.model_validate(row) for row in page.items],
        count=total,
        count_exact=exact,
        next_cursor=page.next_cursor,
    )


@router.post(
    "/deliveries/{delivery_id}/retry",
    summary="Retry a dead delivery",
    responses={**WRITE_ERRORS, **responses(404, 409)},
)
def retry_delivery(session: SessionDep, delivery_id: DeliveryId) -> AlertDeliveryPublic:
    """Queue a dead delivery again (write scope): it is attempted at once, with as many attempts
    as at first. 409 for a delivery that is not dead."""
    return AlertDeliveryPublic.model_validate(queries.retry_alert_delivery(session, delivery_id))
