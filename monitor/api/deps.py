"""Route handler dependencies as ``Annotated`` aliases (``SessionDep``, ``SettingsDep``, ...).

Everything a handler needs lives in one :class:`ApiContext` on ``app.state.context``, built by
:func:`monitor.api.create_app`; nothing here reads the environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Query, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from monitor.api.auth import Principal, TokenStore
from monitor.api.ingest import Ingestor
from monitor.api.sessions import SessionSigner
from monitor.settings import Settings

__all__ = [
    "ApiContext",
    "ContextDep",
    "Cursor",
    "IngestorDep",
    "PageSize",
    "PrincipalDep",
    "ReadSessionDep",
    "SessionDep",
    "SettingsDep",
    "bearer",
]

#: Documents the bearer scheme in OpenAPI; the check itself is
#: :class:`~monitor.api.auth.AuthMiddleware`.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="BearerToken",
    description="A token from `MONITOR_API_TOKENS`. `read` tokens may call GET routes; "
    "`write` tokens may call every route.",
)


@dataclass
class ApiContext:
    """What the application holds for its lifetime."""

    settings: Settings
    engine: Engine
    #: ``engine`` in autocommit mode, for Core reads of list endpoints (see ``ReadSessionDep``).
    read_engine: Engine
    sessions: sessionmaker[Session]
    read_sessions: sessionmaker[Session]
    tokens: TokenStore
    ingestor: Ingestor
    #: Issues and checks the browser session cookies (``/login``).
    signer: SessionSigner


# Dependencies that do no I/O are ``async``: FastAPI runs plain functions in its thread pool,
# and a thread hop per dependency per request is measurable at a few hundred requests/s.


async def get_context(request: Request) -> ApiContext:
    context: ApiContext = request.app.state.context
    return context


ContextDep = Annotated[ApiContext, Depends(get_context)]


async def get_settings(context: ContextDep) -> Settings:
    return context.settings


def get_session(context: ContextDep) -> Iterator[Session]:
    # Synchronous: closing the session returns its connection with a ROLLBACK (I/O).
    with context.sessions() as session:
        yield session


def get_read_session(context: ContextDep) -> Iterator[Session]:
    with context.read_sessions() as session:
        yield session


async def get_ingestor(context: ContextDep) -> Ingestor:
    return context.ingestor


async def get_principal(
    request: Request,
    _credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> Principal:
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None:  # only if the app was assembled without AuthMiddleware
        raise HTTPException(401, "missing bearer token", {"WWW-Authenticate": "Bearer"})
    return principal


SettingsDep = Annotated[Settings, Depends(get_settings)]
#: A session for routes that write (one transaction, committed by the repository call).
SessionDep = Annotated[Session, Depends(get_session)]
#: A session for routes that only read: autocommit, so no BEGIN/ROLLBACK round trips. Nothing
#: is lost: under PostgreSQL's READ COMMITTED every statement takes its own snapshot anyway.
ReadSessionDep = Annotated[Session, Depends(get_read_session)]
IngestorDep = Annotated[Ingestor, Depends(get_ingestor)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]

#: The query parameters of a keyset-paged list (``GET /alarms``, ``/alerts/deliveries``, a
#: stream's ``/ood``): the page size, and the previous page's ``next_cursor``.
PageSize = Annotated[int, Query(ge=1, le=1000, description="Page size.")]
Cursor = Annotated[
    str | None, Query(max_length=512, description="`next_cursor` of the previous page.")
]
