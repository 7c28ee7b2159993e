"""Trace points name the stream's configuration version in force: ``trace_points.config_version``.

A stream's configuration can change while a worker runs (``monitor streams update``); the worker
then restarts the stream's detectors under the new version. Each trace point records the version
it was computed under. Rows written before this revision keep NULL (unknown).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 17:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trace_points") as batch:
        batch.add_column(sa.Column("config_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("trace_points") as batch:
        batch.drop_column("config_version")
