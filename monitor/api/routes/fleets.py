"""``/fleets``: groups of stream detectors under one cross-stream alarm rule (docs/operations.md
"Fleets"); their alarms are ``GET /alarms?fleet=NAME``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Security, status

from monitor.api.deps import ReadSessionDep, SessionDep, bearer
from monitor.api.errors import READ_ERRORS, WRITE_ERRORS, body_error, responses
from monitor.api.schemas import FleetCreate, FleetPublic, FleetsPublic
from monitor.db import queries
from monitor.db.errors import FleetExistsError, FleetNotFoundError
from monitor.db.fleet_runner import create_fleet
from monitor.db.models import FleetRow
from monitor.streams.config import NAME_PATTERN

router = APIRouter(
    prefix="/fleets", tags=["fleets"], dependencies=[Security(bearer)], responses=READ_ERRORS
)

FleetName = Annotated[str, Path(pattern=NAME_PATTERN, description="The fleet's name.")]


@router.get("", summary="List fleets", response_model=FleetsPublic)
def list_fleets(session: ReadSessionDep) -> FleetsPublic:
    """Every fleet, by name, with its rule, EOP level and members."""
    rows = session.scalars(queries.fleets_query()).all()
    return FleetsPublic(data=[FleetPublic.model_validate(r, from_attributes=True) for r in rows],
                        count=len(rows))


@router.get("/{name}", summary="Get a fleet", responses=responses(404))
def get_fleet(session: ReadSessionDep, name: FleetName) -> FleetPublic:
    """One fleet: rule, EOP level, members and the event time it has been decided through."""
    row = session.get(FleetRow, name)
    if row is None:
        raise FleetNotFoundError(f"no fleet named {name!r}")
    return FleetPublic.model_validate(row, from_attributes=True)


@router.post(
    "",
    summary="Register a fleet",
    status_code=status.HTTP_201_CREATED,
    responses={**WRITE_ERRORS, **responses(409)},
)
def post_fleet(session: SessionDep, body: FleetCreate) -> FleetPublic:
    """Store a fleet (write scope); `monitor fleets run NAME` then decides its rule. 409 if the
    name is taken, 422 for a member that is not `stream/detector`."""
    try:
        row = create_fleet(session, body.name, body.members, body.rule, body.alpha)
    except FleetExistsError:
        raise
    except ValueError as exc:
        raise body_error(("members",), str(exc), body.members) from None
    session.commit()
    return FleetPublic.model_validate(row, from_attributes=True)
