"""Fleets: the stored groups of streams under one cross-stream rule."""

from __future__ import annotations

from sqlalchemy import Select, select

from monitor.db.models import FleetRow

__all__ = ["fleets_query"]


def fleets_query() -> Select[FleetRow]:
    """Every stored fleet, by name."""
    return select(FleetRow).order_by(FleetRow.name)
