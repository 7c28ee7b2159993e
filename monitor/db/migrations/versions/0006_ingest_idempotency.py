"""Idempotent HTTP ingest: the events ``POST /events`` processed (by stream, kind and id) and the
answers of requests sent with an ``Idempotency-Key``, both committed with the batch's results and
pruned after the de-duplication window.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 16:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.TIMESTAMP(timezone=True)
NOW = sa.text("CURRENT_TIMESTAMP")


def upgrade() -> None:
    op.create_table(
        "ingested_events",
        sa.Column("stream", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("event_id", sa.String(255), nullable=False),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("stream", "kind", "event_id", name=op.f("pk_ingested_events")),
    )
    op.create_index("ix_ingested_events_created_at", "ingested_events", ["created_at"])
    op.create_table(
        "ingest_requests",
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("body_sha256", sa.String(64), nullable=False),
        sa.Column("response", JSON, nullable=False),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_ingest_requests")),
    )
    op.create_index("ix_ingest_requests_created_at", "ingest_requests", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_ingest_requests_created_at", table_name="ingest_requests")
    op.drop_table("ingest_requests")
    op.drop_index("ix_ingested_events_created_at", table_name="ingested_events")
    op.drop_table("ingested_events")
