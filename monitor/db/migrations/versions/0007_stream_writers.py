"""One writer per stream: the source of writes each stream is bound to (``stream_writers``) and
the fencing tokens of the writers of each source partition (``writer_fences``).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 17:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.TIMESTAMP(timezone=True)
NOW = sa.text("CURRENT_TIMESTAMP")


def upgrade() -> None:
    op.create_table(
        "stream_writers",
        sa.Column("stream", sa.String(128), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("group_id", sa.String(255), server_default="", nullable=False),
        sa.Column("updated_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("stream", name=op.f("pk_stream_writers")),
    )
    op.create_table(
        "writer_fences",
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("group_id", sa.String(255), server_default="", nullable=False),
        sa.Column("epoch", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("updated_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("source", "partition", name=op.f("pk_writer_fences")),
    )


def downgrade() -> None:
    op.drop_table("writer_fences")
    op.drop_table("stream_writers")
