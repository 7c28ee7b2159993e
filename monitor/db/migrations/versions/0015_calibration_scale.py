"""Calibration rows keep the model's predicted scale: ``calibration_events.scale``.

A stream scored with ``normalized_residual`` (|y − ŷ| / scale) needs each calibration row's
``scale`` to be rebuilt from the database (by the worker and by ``POST /events``). Other streams
leave it NULL.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 20:15:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("calibration_events") as batch:
        batch.add_column(sa.Column("scale", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("calibration_events") as batch:
        batch.drop_column("scale")
