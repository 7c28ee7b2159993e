"""Initial schema: streams, calibration events, alarms, trace points, OOD windows and flags,
checkpoints, source offsets, dead letters, webhook deliveries.

Revision ID: 0001
Revises:
Create Date: 2026-11-30 15:56:08+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TS = sa.TIMESTAMP(timezone=True)
NOW = sa.text("CURRENT_TIMESTAMP")
NAME, SHORT, LABEL = sa.String(128), sa.String(64), sa.String(255)


def upgrade() -> None:
    op.create_table(
        "streams",
        sa.Column("name", NAME, nullable=False),
        sa.Column("task", SHORT, nullable=False),
        sa.Column("config", JSON, nullable=False),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.Column("updated_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_streams")),
    )
    op.create_table(
        "calibration_events",
        sa.Column("stream", NAME, nullable=False),
        sa.Column("idx", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("event_id", LABEL, nullable=True),
        sa.Column("features", JSON, nullable=False),
        sa.Column("prediction", JSON, nullable=False),
        sa.Column("label", JSON, nullable=True),
        sa.Column("logits", JSON, nullable=True),
        sa.Column("embedding", JSON, nullable=True),
        sa.ForeignKeyConstraint(
            ["stream"],
            ["streams.name"],
            name=op.f("fk_calibration_events_stream_streams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("stream", "idx", name=op.f("pk_calibration_events")),
    )
    op.create_table(
        "alarms",
        sa.Column("id", SHORT, nullable=False),
        sa.Column("stream", NAME, nullable=False),
        sa.Column("detector", SHORT, nullable=False),
        sa.Column("kind", SHORT, nullable=False),
        sa.Column("event_id", LABEL, nullable=False),
        sa.Column("event_index", sa.BigInteger(), nullable=False),
        sa.Column("ts", TS, nullable=False),
        sa.Column("changepoint", sa.BigInteger(), nullable=True),
        sa.Column("statistic", sa.Double(), nullable=False),
        sa.Column("threshold", sa.Double(), nullable=False),
        sa.Column("rule", SHORT, nullable=False),
        sa.Column("evidence", JSON, nullable=False),
        sa.Column("acknowledged_at", TS, nullable=True),
        sa.Column("acknowledged_by", LABEL, nullable=True),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alarms")),
        sa.UniqueConstraint(
            "stream", "detector", "event_index", name=op.f("uq_alarms_stream_detector_event_index")
        ),
    )
    op.create_index("ix_alarms_stream_ts_id", "alarms", ["stream", "ts", "id"])
    op.create_index("ix_alarms_ts_id", "alarms", ["ts", "id"])
    op.create_index("ix_alarms_kind_ts_id", "alarms", ["kind", "ts", "id"])
    op.create_table(
        "trace_points",
        sa.Column("stream", NAME, nullable=False),
        sa.Column("detector", SHORT, nullable=False),
        sa.Column("event_index", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("ts", TS, nullable=False),
        sa.Column("log_martingale", sa.Double(), nullable=True),
        sa.Column("p_value", sa.Double(), nullable=True),
        sa.Column("log_statistic", sa.Double(), nullable=True),
        sa.Column("log_threshold", sa.Double(), nullable=True),
        sa.Column("weights_ess", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("stream", "detector", "event_index", name=op.f("pk_trace_points")),
    )
    op.create_index("ix_trace_points_stream_event_index", "trace_points", ["stream", "event_index"])
    op.create_index("ix_trace_points_stream_ts", "trace_points", ["stream", "ts"])
    op.create_table(
        "ood_windows",
        sa.Column("stream", NAME, nullable=False),
        sa.Column("window_index", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("start_index", sa.BigInteger(), nullable=False),
        sa.Column("end_index", sa.BigInteger(), nullable=False),
        sa.Column("ts", TS, nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("n_flagged", sa.Integer(), nullable=False),
        sa.Column("threshold", sa.Double(), nullable=True),
        sa.Column("rule", SHORT, nullable=False),
        sa.Column("alpha", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("stream", "window_index", name=op.f("pk_ood_windows")),
    )
    op.create_index("ix_ood_windows_stream_ts", "ood_windows", ["stream", "ts"])
    op.create_table(
        "ood_flags",
        sa.Column("stream", NAME, nullable=False),
        sa.Column("window_index", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("event_id", LABEL, nullable=False),
        sa.ForeignKeyConstraint(
            ["stream", "window_index"],
            ["ood_windows.stream", "ood_windows.window_index"],
            name=op.f("fk_ood_flags_stream_window_index_ood_windows"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("stream", "window_index", "event_id", name=op.f("pk_ood_flags")),
    )
    op.create_table(
        "checkpoints",
        sa.Column("stream", NAME, nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("event_index", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("arrays", sa.LargeBinary(), nullable=True),
        sa.Column("updated_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("stream", name=op.f("pk_checkpoints")),
    )
    op.create_table(
        "source_offsets",
        sa.Column("source", LABEL, nullable=False),
        sa.Column("partition", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("source", "partition", name=op.f("pk_source_offsets")),
    )
    op.create_table(
        "dead_letters",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("source", LABEL, nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("offset", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("stream", NAME, nullable=True),
        sa.Column("ts", TS, nullable=False),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dead_letters")),
        sa.UniqueConstraint(
            "source", "partition", "offset", name=op.f("uq_dead_letters_source_partition_offset")
        ),
    )
    op.create_index("ix_dead_letters_ts", "dead_letters", ["ts"])
    op.create_index("ix_dead_letters_stream_ts", "dead_letters", ["stream", "ts"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", ID, autoincrement=True, nullable=False),
        sa.Column("alarm_id", SHORT, nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("idempotency_key", LABEL, nullable=False),
        sa.Column("created_at", TS, server_default=NOW, nullable=False),
        sa.ForeignKeyConstraint(
            ["alarm_id"],
            ["alarms.id"],
            name=op.f("fk_webhook_deliveries_alarm_id_alarms"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint(
            "idempotency_key",
            "url",
            "attempt",
            name=op.f("uq_webhook_deliveries_idempotency_key_url_attempt"),
        ),
    )
    op.create_index(
        op.f("ix_webhook_deliveries_alarm_id"), "webhook_deliveries", ["alarm_id"]
    )


def downgrade() -> None:
    # Children before parents; dropping a table drops its indexes.
    for table in (
        "webhook_deliveries",
        "dead_letters",
        "source_offsets",
        "checkpoints",
        "ood_flags",
        "ood_windows",
        "trace_points",
        "alarms",
        "calibration_events",
        "streams",
    ):
        op.drop_table(table)
