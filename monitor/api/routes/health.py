"""``GET /health``: liveness and database reachability, without a token (for load balancers)."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from monitor._version import __version__
from monitor.api.deps import ContextDep
from monitor.api.schemas import Health

router = APIRouter(tags=["health"])


@router.get("/health", summary="Liveness and database reachability (no token)")
def health(context: ContextDep) -> Health:
    """Always 200 while the process serves requests; ``database`` says whether a trivial query
    succeeded, so a load balancer can tell a dead process from a lost database."""
    try:
        with context.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        database = "ok"
    except SQLAlchemyError:
        database = "unreachable"
    status = "ok" if database == "ok" else "degraded"
    return Health(status=status, database=database, version=__version__)
