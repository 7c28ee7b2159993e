"""Alert routing: the ``alert_outbox`` table, and the receiver of each recorded delivery attempt.

One outbox row per (alarm, receiver), inserted in the transaction that stores the alarm, so a
crash can no longer lose a delivery (at-least-once across restarts). ``webhook_deliveries``
gains ``receiver`` (the receiver's configured name; NULL for attempts recorded before).

Revision ID: 0011
Revises: 0008
Create Date: 2026-12-01 19:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.TIMESTAMP(timezone=True)
NOW = sa.text("CURRENT_TIMESTAMP")
SHORT, LABEL = sa.String(64), sa.String(255)


def upgrade() -> None:
    op.create_table(
        "alert_outbox",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("alarm_id", SHORT, nullable=False),
        sa.Column("receiver", LABEL, nullable=False),
        sa.Column("receiver_type", SHORT, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("idempotency_key", LABEL, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", SHORT, server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("attempt_limit", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", TS, nullable=False),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.Column("updated_at", TS, server_default=NOW, nullable=False),
        sa.Column("delivered_at", TS, nullable=True),
        sa.ForeignKeyConstraint(
            ["alarm_id"],
            ["alarms.id"],
            name=op.f("fk_alert_outbox_alarm_id_alarms"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_outbox")),
        sa.UniqueConstraint(
            "idempotency_key", "receiver", name=op.f("uq_alert_outbox_idempotency_key_receiver")
        ),
    )
    op.create_index(op.f("ix_alert_outbox_alarm_id"), "alert_outbox", ["alarm_id"])
    op.create_index(
        "ix_alert_outbox_status_next_attempt_at", "alert_outbox", ["status", "next_attempt_at"]
    )
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.add_column(sa.Column("receiver", LABEL, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_column("receiver")
    op.drop_table("alert_outbox")
