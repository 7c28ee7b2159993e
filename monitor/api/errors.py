"""Error responses: persistence errors mapped to HTTP statuses, and their OpenAPI documentation.

Bad input is always a 4xx with a sentence saying what to fix; an unexpected failure is a 500
whose body says nothing about the internals (the traceback goes to the log).
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from monitor.api.schemas import AmbiguousIdResponse, ErrorResponse
from monitor.db.errors import (
    DeliveryNotDeadError,
    FleetExistsError,
    InvalidCursorError,
    NotFoundError,
    StreamBoundError,
    StreamExistsError,
)
from monitor.streams.alarm_ids import AmbiguousAlarmIdError

__all__ = [
    "READ_ERRORS",
    "WRITE_ERRORS",
    "ambiguous_id_response",
    "body_error",
    "install_error_handlers",
    "responses",
]

log = logging.getLogger(__name__)

_DESCRIPTIONS = {
    400: "The request body could not be read (for example, it is not UTF-8).",
    401: "Missing or invalid bearer token (see the `WWW-Authenticate` header).",
    403: "The token lacks the `write` scope this route needs.",
    404: "No such resource.",
    409: "The resource already exists.",
    413: "Request body larger than the configured limit.",
    503: "The database is unreachable; retry later.",
}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for error statuses, all with :class:`ErrorResponse`."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorResponse, "description": _DESCRIPTIONS[status]}
        if status == 401:
            entry["headers"] = {
                "WWW-Authenticate": {
                    "description": '`Bearer realm="monitor"`, with `error="invalid_token"` when '
                    "a token was sent",
                    "schema": {"type": "string"},
                }
            }
        out[status] = entry
    return out


def ambiguous_id_response() -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entry of a route taking an alarm id: 409 when several ids start
    with the prefix given."""
    return {
        409: {
            "model": AmbiguousIdResponse,
            "description": "Several alarm ids start with the prefix given (`candidates`); "
            "give more of the id.",
        }
    }


#: Errors every protected route can answer.
READ_ERRORS = responses(401, 503)
#: Errors every write route can answer.
WRITE_ERRORS = responses(400, 401, 403, 413, 503)


def install_error_handlers(app: FastAPI) -> None:
    """Map persistence errors to 404 / 409 / 422 / 503 and hide unexpected errors behind 500."""
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(NotFoundError, _status(404))
    app.add_exception_handler(StreamExistsError, _status(409))
    app.add_exception_handler(StreamBoundError, _status(409))
    app.add_exception_handler(DeliveryNotDeadError, _status(409))
    app.add_exception_handler(FleetExistsError, _status(409))
    app.add_exception_handler(AmbiguousAlarmIdError, _ambiguous_id)
    app.add_exception_handler(InvalidCursorError, _invalid_cursor)
    app.add_exception_handler(OperationalError, _database_down)
    app.add_exception_handler(DataError, _data_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _unexpected)


def _status(code: int) -> Any:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=code)

    return handler


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request.app, request.url.path))
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Methods the OpenAPI schema documents for ``path`` (every route sharing the path, where
    Starlette's own 405 names only the first route that matched)."""
    methods: set[str] = set()
    for template, operations in app.openapi()["paths"].items():
        if re.fullmatch(re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template)), path):
            methods |= {m.upper() for m in operations}
    return sorted(methods)


async def _ambiguous_id(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AmbiguousAlarmIdError)
    return JSONResponse({"detail": str(exc), "candidates": exc.candidates}, status_code=409)


async def _invalid_cursor(request: Request, exc: Exception) -> JSONResponse:
    detail = [
        {
            "type": "value_error",
            "loc": ["query", "cursor"],
            "msg": str(exc),
            "input": request.query_params.get("cursor"),
        }
    ]
    return JSONResponse({"detail": detail}, status_code=422)


async def _database_down(request: Request, exc: Exception) -> JSONResponse:
    log.error("database error on %s %s: %s", request.method, request.url.path, exc)
    return JSONResponse({"detail": "the database is unreachable; retry later"}, status_code=503)


async def _data_error(request: Request, exc: Exception) -> JSONResponse:
    # The database refused a value the schemas let through (e.g. a NUL character in text).
    log.info("database refused a value on %s %s: %s", request.method, request.url.path, exc)
    detail = "a value in the request cannot be stored (control characters such as NUL?)"
    return JSONResponse({"detail": detail}, status_code=422)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    # FastAPI echoes the offending input; NaN/Infinity (accepted by the JSON parser) cannot be
    # rendered as JSON, so non-finite numbers are echoed as strings instead of failing with 500.
    assert isinstance(exc, RequestValidationError)
    errors = jsonable_encoder(_finite_inputs(exc.errors()))
    return JSONResponse({"detail": errors}, status_code=422)


def _finite_inputs(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite_inputs(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_inputs(v) for v in value]
    return value


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return JSONResponse({"detail": "internal server error"}, status_code=500)


def body_error(loc: tuple[str | int, ...], message: str, value: Any) -> RequestValidationError:
    """A 422 about a part of the request body, in FastAPI's validation-error shape."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ("body", *loc), "msg": message, "input": value}]
    )
