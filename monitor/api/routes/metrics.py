"""``GET /metrics``: Prometheus text exposition, read from the database at scrape time."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, Security
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from monitor.api.deps import bearer
from monitor.api.errors import READ_ERRORS

router = APIRouter(tags=["metrics"], dependencies=[Security(bearer)], responses=READ_ERRORS)

_EXAMPLE = """\
# HELP monitor_log_martingale Latest log test-martingale (natural log) of the detector.
# TYPE monitor_log_martingale gauge
monitor_log_martingale{detector="conditional",stream="bikes"} 8.9
"""


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text format 0.0.4.",
            "content": {"text/plain": {"schema": {"type": "string"}, "example": _EXAMPLE}},
        }
    },
)
def metrics(request: Request) -> Response:
    """Events, alarms, dead letters, label-join backlog, and per stream and detector the latest
    log-martingale, p-value, statistic and threshold (see docs/api.md for every name). Configure
    Prometheus with `authorization: {credentials: <read token>}`."""
    body = generate_latest(request.app.state.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
