"""Model performance over time: ``performance_windows`` (one row per window of a stream's labelled
events, with its metrics as a JSON object; docs/explain.md).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 18:45:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "performance_windows",
        sa.Column("stream", sa.String(128), nullable=False),
        sa.Column("window_index", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("start_index", sa.BigInteger(), nullable=False),
        sa.Column("end_index", sa.BigInteger(), nullable=False),
        sa.Column("ts", sa.TIMESTAMP(timezone=True), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("metrics", JSON, nullable=False),
        sa.PrimaryKeyConstraint("stream", "window_index", name=op.f("pk_performance_windows")),
    )
    op.create_index(
        "ix_performance_windows_stream_ts", "performance_windows", ["stream", "ts"]
    )


def downgrade() -> None:
    op.drop_index("ix_performance_windows_stream_ts", table_name="performance_windows")
    op.drop_table("performance_windows")
