"""Fleets: named groups of stream detectors under one cross-stream rule, and their alarms.

``fleets`` holds each fleet's rule (``e_d_bh``, ``e_d_bonferroni``, ``per_stream``), its EOP
level, its members (``stream/detector``), the decider's state and the event time through which
it has been evaluated. ``alarms`` gains ``fleet``, ``fleet_rule`` and ``fleet_level``: the fleet
whose rule admitted the alarm (NULL for a stream's own alarm), with an index for ``?fleet=``.

Revision ID: 0014
Revises: 0010
Create Date: 2026-12-01 19:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.TIMESTAMP(timezone=True)
NOW = sa.text("CURRENT_TIMESTAMP")
NAME, SHORT = sa.String(128), sa.String(64)


def upgrade() -> None:
    op.create_table(
        "fleets",
        sa.Column("name", NAME, nullable=False),
        sa.Column("rule", SHORT, nullable=False),
        sa.Column("alpha", sa.Double(), nullable=False),
        sa.Column("members", JSON, nullable=False),
        sa.Column("state", JSON, nullable=False),
        sa.Column("evaluated_through", TS, nullable=True),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.Column("updated_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_fleets")),
    )
    with op.batch_alter_table("alarms") as batch:
        batch.add_column(sa.Column("fleet", NAME, nullable=True))
        batch.add_column(sa.Column("fleet_rule", SHORT, nullable=True))
        batch.add_column(sa.Column("fleet_level", sa.Double(), nullable=True))
        batch.create_index("ix_alarms_fleet_ts_id", ["fleet", "ts", "id"])


def downgrade() -> None:
    with op.batch_alter_table("alarms") as batch:
        batch.drop_index("ix_alarms_fleet_ts_id")
        batch.drop_column("fleet_level")
        batch.drop_column("fleet_rule")
        batch.drop_column("fleet")
    op.drop_table("fleets")
