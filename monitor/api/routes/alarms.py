"""``/alarms``: list with filters and keyset pagination, read one, acknowledge one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, HTTPException, Path, Query, Response, Security
from fastapi.responses import HTMLResponse
from sqlalchemy import Engine
from starlette.concurrency import run_in_threadpool

from monitor.api import bodies
from monitor.api.deps import (
    ContextDep,
    Cursor,
    PageSize,
    PrincipalDep,
    ReadSessionDep,
    SessionDep,
    bearer,
)
from monitor.api.errors import READ_ERRORS, WRITE_ERRORS, ambiguous_id_response, responses
from monitor.api.schemas import (
    AckRequest,
    AlarmDetail,
    AlarmKindName,
    AlarmPublic,
    AlarmsPublic,
    DetectorName,
)
from monitor.api.timeutil import RevisedSince, Since, Until, check_range
from monitor.db import queries
from monitor.db.errors import AlarmNotFoundError
from monitor.db.models import AlarmRow
from monitor.ops.report import render_html, report_context
from monitor.streams.config import NAME_PATTERN

router = APIRouter(
    prefix="/alarms", tags=["alarms"], dependencies=[Security(bearer)], responses=READ_ERRORS
)

AlarmId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        description="The alarm's id, or a prefix of at least 4 hexadecimal digits that no "
        "other alarm's id starts with (409 with the candidates when several do).",
        examples=["0b1e7a3c-5f7e-5d41-9a43-3d2f1c0e9b77"],
    ),
]


def to_public(row: AlarmRow) -> AlarmPublic:
    """The response body of an alarm row."""
    return AlarmPublic.model_validate(row, from_attributes=True)


@router.get("", summary="List alarms, newest first", response_model=AlarmsPublic)
async def list_alarms(
    context: ContextDep,
    stream: Annotated[
        str | None, Query(pattern=NAME_PATTERN, description="Only this stream.")
    ] = None,
    kind: Annotated[AlarmKindName | None, Query(description="Only this diagnosis.")] = None,
    detector: Annotated[DetectorName | None, Query(description="Only this detector.")] = None,
    since: Since = None,
    until: Until = None,
    acknowledged: Annotated[bool | None, Query(description="Only (un)acknowledged alarms.")] = None,
    revised_since: RevisedSince = None,
    fleet: Annotated[
        str | None,
        Query(pattern=NAME_PATTERN, description="Only the alarms this fleet's rule admitted."),
    ] = None,
    limit: PageSize = 100,
    cursor: Cursor = None,
) -> Response:
    """Alarms matching every given filter, ordered by time then id, newest first.

    Pagination is by keyset: pass the page's `next_cursor` as `cursor` (with the same filters)
    to get the next page; alarms stored meanwhile never make a page repeat or skip one.
    An alarm raised as `insufficient_evidence` keeps its `ts` when it is revised: a client
    polling with `since` sees new alarms, one polling with `revised_since` sees revisions.
    """
    start, end = check_range(since, until)
    revised, _ = check_range(revised_since, None)
    filters = queries.AlarmFilters(
        stream=stream,
        kind=kind,
        detector=detector,
        since=start,
        until=end,
        acknowledged=acknowledged,
        revised_since=revised,
        fleet=fleet,
    )
    # One thread hop for all the blocking work (a sync route with a sync session dependency
    # costs three), and the body is validated and serialised once, in pydantic-core.
    body = await run_in_threadpool(_alarms_json, context.read_engine, filters, limit, cursor)
    return Response(body, media_type="application/json")


def _alarms_json(
    engine: Engine, filters: queries.AlarmFilters, limit: int, cursor: str | None
) -> bytes:
    with engine.connect() as connection:
        return bodies.alarms_body(connection, filters, limit, cursor)


#: The answers of a route taking an alarm id (an unknown id is a 404, an ambiguous prefix a 409:
#: the error handlers of AlarmNotFoundError and AmbiguousAlarmIdError).
_BY_ID = responses(404) | ambiguous_id_response()


@router.get("/{alarm_id}", summary="Read one alarm", responses=_BY_ID)
def get_alarm(session: ReadSessionDep, alarm_id: AlarmId) -> AlarmDetail:
    """The alarm with its diagnosis, evidence and acknowledgement, and every version of its
    diagnosis (`revisions`)."""
    whole = queries.resolve_alarm_id(session, alarm_id)
    row = queries.get_alarm(session, whole)
    if row is None:  # deleted since (retention)
        raise HTTPException(404, f"no alarm with id {alarm_id!r}")
    revisions = [
        {"revision": r.revision, "kind": r.kind, "evidence": r.evidence,
         "revised_at": r.revised_at}
        for r in session.scalars(queries.alarm_revisions_query(whole))
    ]
    return AlarmDetail.model_validate(
        to_public(row).model_dump() | {"revisions": revisions}
    )


def _json_errors(answers: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """Error ``answers`` (:func:`responses`) documented as JSON on a route whose own responses
    are not: FastAPI gives a ``model`` the route's media type (text/html here)."""
    return {
        status: {k: v for k, v in entry.items() if k != "model"}
        | {"content": {"application/json": {"schema": {
            "$ref": f"#/components/schemas/{entry['model'].__name__}"}}}}
        for status, entry in answers.items()
    }


@router.get(
    "/{alarm_id}/report",
    summary="One alarm's report (HTML)",
    response_class=HTMLResponse,
    responses={**_json_errors(responses(401, 404, 503) | ambiguous_id_response()),
               200: {"content": {"text/html": {}}}},
)
def alarm_report(session: ReadSessionDep, alarm_id: AlarmId) -> HTMLResponse:
    """One self-contained HTML page explaining the alarm: both detectors' martingale traces
    around it with the threshold and changepoint, the diagnosis and the evidence numbers, and
    the feature attribution when the alarm has one (no script, no external resource)."""
    try:
        context = report_context(session, queries.resolve_alarm_id(session, alarm_id))
    except AlarmNotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    return HTMLResponse(render_html(context))


@router.post(
    "/{alarm_id}/ack", summary="Acknowledge an alarm", responses={**WRITE_ERRORS, **_BY_ID}
)
def acknowledge(
    session: SessionDep,
    principal: PrincipalDep,
    alarm_id: AlarmId,
    body: Annotated[AckRequest | None, Body()] = None,
) -> AlarmPublic:
    """Mark the alarm acknowledged (write scope). Idempotent: the first acknowledgement (time
    and author) is kept and returned by later calls."""
    by = body.by if body is not None and body.by else f"token:{principal.token_id}"
    try:
        row = queries.acknowledge_alarm(session, alarm_id, by=by)
    except AlarmNotFoundError as exc:
        raise HTTPException(404, str(exc)) from None
    return to_public(row)
