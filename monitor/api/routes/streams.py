"""``/streams``: register and read streams, their downsampled traces, their OOD windows and the
model's performance windows."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response, Security, status
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from monitor.api import bodies
from monitor.api.deps import Cursor, PageSize, ReadSessionDep, SessionDep, bearer
from monitor.api.errors import READ_ERRORS, WRITE_ERRORS, body_error, responses
from monitor.api.ingest import build_monitor
from monitor.api.schemas import (
    DetectorName,
    OODWindowPublic,
    OODWindowsPublic,
    PerformanceWindowPublic,
    PerformanceWindowsPublic,
    StreamCreate,
    StreamPublic,
    StreamsPublic,
    TracePublic,
)
from monitor.api.timeutil import Since, Until, check_range
from monitor.db import queries
from monitor.db.models import AlarmRow, CalibrationEventRow, CheckpointRow, StreamRow
from monitor.db.store import load_state
from monitor.streams.calibration import Calibration, CalibrationError
from monitor.streams.config import NAME_PATTERN, AlarmConfig, StreamConfig

router = APIRouter(
    prefix="/streams", tags=["streams"], dependencies=[Security(bearer)], responses=READ_ERRORS
)

StreamPath = Annotated[
    str, Path(pattern=NAME_PATTERN, description="The stream's name.", examples=["bikes"])
]


@router.get("", summary="List registered streams")
def list_streams(session: ReadSessionDep) -> StreamsPublic:
    """Every registered stream with its configuration and progress, by name."""
    rows = queries.list_streams(session)
    stats = _stream_stats(session, None)
    data = [_public(row, stats) for row in rows]
    return StreamsPublic(data=data, count=len(data))


@router.post(
    "",
    summary="Register a stream",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {
            "model": StreamPublic,
            "description": "Registered already with this configuration: nothing changed.",
        },
        **WRITE_ERRORS,
        **responses(409),
    },
)
def create_stream(body: StreamCreate, session: SessionDep, response: Response) -> StreamPublic:
    """Register a stream with its configuration and inline calibration rows (write scope).

    The calibration rows are validated the way the worker will use them (shape, labels, task);
    any problem is a 422 naming the row or field. A name already registered with the same
    configuration and calibration rows is a 200 that changes nothing (a retry is safe); with
    another one, a 409 that changes nothing: `PUT /streams/{name}` stores a new version.
    """
    config, rows = _validated(body)
    row, created = queries.register_stream(session, config, rows)
    response.headers["Location"] = f"/streams/{config.name}"
    if not created:
        response.status_code = status.HTTP_200_OK
    return _public(row, _stream_stats(session, config.name))


@router.put(
    "/{name}",
    summary="Store a new version of a stream's configuration",
    responses={**WRITE_ERRORS, **responses(404)},
)
def update_stream(name: StreamPath, body: StreamCreate, session: SessionDep) -> StreamPublic:
    """Replace a registered stream's configuration and calibration rows (write scope), stored
    as its next `version`; the same configuration and rows again store nothing. The body is
    what `POST /streams` takes, with the path's name. Workers pick the new version up as
    docs/operations.md "Stream configuration versions" says.
    """
    if body.name != name:
        raise body_error(("name",), f"the body's name must be the path's, {name!r}", body.name)
    config, rows = _validated(body)
    row, _ = queries.new_stream_version(session, config, rows)
    return _public(row, _stream_stats(session, config.name))


def _validated(body: StreamCreate) -> tuple[StreamConfig, list[dict[str, Any]]]:
    """The configuration to store (without its rows) and the calibration rows; 422 unless the
    worker could monitor the stream with them."""
    rows = body.calibration
    _check_monitorable(StreamConfig.model_validate(body.model_dump()), rows)
    # The rows live in calibration_events; keeping them in the configuration too would double
    # the row size of every stream read.
    return StreamConfig.model_validate({**body.model_dump(), "calibration": []}), rows


@router.get("/{name}", summary="Read one stream", responses=responses(404))
def get_stream(name: StreamPath, session: ReadSessionDep) -> StreamPublic:
    """The stream's configuration (without calibration rows) and progress, with the count of
    its events without `ts` and the warnings they call for."""
    row = _get_row(session, name)
    public = _public(row, _stream_stats(session, name))
    checkpoint = load_state(session, name)
    without_ts = 0 if checkpoint is None else int(checkpoint.state.get("events_without_ts", 0))
    public.events_without_ts = without_ts
    public.warnings = _warnings(AlarmConfig.model_validate(row.config.get("alarm") or {}),
                                without_ts)
    return public


def _warnings(alarm: AlarmConfig, events_without_ts: int) -> list[str]:
    """One sentence per problem an operator should fix: events without ``ts`` (``alarm``: the
    stream's conditional alarm rule)."""
    if not events_without_ts:
        return []
    threshold, budget = alarm.event_threshold, ""
    if threshold is not None:
        budget = (f", and the alarm budget ran them on its event-count threshold "
                  f"{threshold:g} instead of following the stream's event rate")
    return [f"{events_without_ts} events had no ts: they were timed by the broker or at "
            f"ingest{budget}; give every event its ts (the time the model made the prediction)"]


@router.get(
    "/{name}/trace",
    summary="Downsampled detector traces",
    responses=responses(404),
    response_model=TracePublic,
)
def get_trace(
    name: StreamPath,
    session: ReadSessionDep,
    detector: Annotated[DetectorName | None, Query(description="Only this detector.")] = None,
    since: Since = None,
    until: Until = None,
    max_points: Annotated[
        int, Query(ge=2, le=10_000, description="Most points per detector.")
    ] = 1000,
) -> Response:
    """Log-martingale, p-value, statistic and threshold over time, per detector.

    At most `max_points` points per detector: buckets of consecutive stored points keep their
    point with the largest statistic, so downsampling never hides a threshold crossing, and each
    detector's latest point is always included.
    """
    start, end = check_range(since, until)
    _get_row(session, name)
    body = bodies.trace_body(session, name, detector, start, end, max_points)
    return Response(body, media_type="application/json")


@router.get("/{name}/ood", summary="OOD decisions by window", responses=responses(404))
def get_ood(
    name: StreamPath,
    session: ReadSessionDep,
    since: Since = None,
    until: Until = None,
    limit: PageSize = 100,
    cursor: Cursor = None,
) -> OODWindowsPublic:
    """The stream's OOD windows, newest first, each with the ids of the events its decision rule
    flagged (FDR controlled at the window's `alpha`)."""
    start, end = check_range(since, until)
    _get_row(session, name)
    page, (total, exact) = queries.ood_page(session, name, start, end, limit, cursor)
    data = [
        OODWindowPublic.model_validate({**_columns(w), "flagged_ids": list(ids)})
        for w, ids in page.items
    ]
    return OODWindowsPublic(
        stream=name, data=data, count=total, count_exact=exact, next_cursor=page.next_cursor
    )


@router.get("/{name}/performance", summary="Model performance by window", responses=responses(404))
def get_performance(
    name: StreamPath,
    session: ReadSessionDep,
    since: Since = None,
    until: Until = None,
    limit: Annotated[int, Query(ge=1, le=1000, description="Most windows returned.")] = 100,
) -> PerformanceWindowsPublic:
    """The stream's latest performance windows with `since <= ts < until`, oldest first: the
    model's metrics over each window of `performance.window` labelled events."""
    start, end = check_range(since, until)
    _get_row(session, name)
    rows = queries.performance_windows(session, name, start, end, limit)
    data = [PerformanceWindowPublic.model_validate(row) for row in rows]
    return PerformanceWindowsPublic(stream=name, data=data, count=len(data))


def _check_monitorable(config: StreamConfig, rows: list[dict[str, Any]]) -> None:
    """422 unless the worker could monitor this stream with these calibration rows."""
    try:
        calibration = Calibration.from_rows(rows, **config.schema_options)
    except CalibrationError as exc:
        raise body_error(("calibration",), str(exc), None) from None
    try:
        build_monitor(config, calibration)
    except (ValueError, LookupError) as exc:
        raise body_error(
            (), f"this configuration cannot monitor this calibration data: {exc}", None
        ) from None


def _get_row(session: Session, name: str) -> StreamRow:
    row = queries.get_stream(session, name)
    if row is None:
        raise HTTPException(404, f"no stream named {name!r}; GET /streams lists them")
    return row


def _columns(row: Any) -> dict[str, Any]:
    return {c.key: getattr(row, c.key) for c in row.__table__.columns}


def _stream_stats(session: Session, name: str | None) -> dict[str, dict[str, Any]]:
    """Calibration size, events processed, alarms and last checkpoint time per stream."""
    stats: dict[str, dict[str, Any]] = {}

    def grouped(column: Any, value: Any, key: str) -> None:
        query = select(column, value).group_by(column)
        if name is not None:
            query = query.where(column == name)
        for stream, v in session.execute(query):
            stats.setdefault(stream, {})[key] = v

    grouped(CalibrationEventRow.stream, func.count(), "calibration_events")
    grouped(AlarmRow.stream, func.count(), "alarms")
    grouped(CheckpointRow.stream, func.max(CheckpointRow.event_index), "events")
    grouped(CheckpointRow.stream, func.max(CheckpointRow.updated_at), "last_event_at")
    return stats


def _public(row: StreamRow, stats: dict[str, dict[str, Any]]) -> StreamPublic:
    own = stats.get(row.name, {})
    config = {k: v for k, v in row.config.items() if k != "calibration"}
    return StreamPublic(
        name=row.name,
        task=row.task,
        version=row.version,
        config=config,
        calibration_events=own.get("calibration_events", 0),
        events=own.get("events", 0),
        alarms=own.get("alarms", 0),
        last_event_at=own.get("last_event_at"),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
