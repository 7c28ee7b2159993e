"""Stored time budgets keep the threshold they had: ``alarm.min_threshold: 2``.

This release adds ``min_threshold`` to a ``false_alarm_every`` budget, the lowest threshold the
budget sets (default 100 000; docs/detectors.md, "The threshold floor"). A stream's stored
configuration has every default filled in, so that a release changing a default leaves
registered streams as they were (docs/operations.md, "Changed defaults"): a budget stored
before this release gets ``min_threshold: 2``, the floor it had (``max(2, 2·T·r̂)``).
Downgrading removes the field, which the previous release does not know. (The offline SQL of
``alembic upgrade --sql`` leaves the configurations as they are: it cannot read them.)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02 00:10:00+00:00
"""

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
STREAMS = sa.table("streams", sa.column("name", sa.String(128)), sa.column("config", JSON))
#: The floor every budget had before ``min_threshold`` existed.
OLD_FLOOR = 2.0


def _rewrite(change: Callable[[dict[str, Any]], bool]) -> None:
    """Apply ``change`` to each stored alarm section (``alarm``, ``covariate_alarm``) and write
    back the configurations it changed."""
    if op.get_context().as_sql:  # offline SQL cannot read the stored configurations
        return
    bind = op.get_bind()
    for name, config in bind.execute(sa.select(STREAMS.c.name, STREAMS.c.config)).all():
        sections = [config.get(k) for k in ("alarm", "covariate_alarm")]
        changed = [change(s) for s in sections if isinstance(s, dict)]
        if any(changed):
            bind.execute(STREAMS.update().where(STREAMS.c.name == name).values(config=config))


def _add_old_floor(alarm: dict[str, Any]) -> bool:
    if alarm.get("false_alarm_every") is None or "min_threshold" in alarm:
        return False
    alarm["min_threshold"] = OLD_FLOOR
    return True


def _drop_floor(alarm: dict[str, Any]) -> bool:
    if "min_threshold" not in alarm:
        return False
    del alarm["min_threshold"]
    return True


def upgrade() -> None:
    _rewrite(_add_old_floor)


def downgrade() -> None:
    _rewrite(_drop_floor)
