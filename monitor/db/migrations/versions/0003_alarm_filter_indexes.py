"""Indexes for the ``GET /alarms`` filters that combine a stream with a kind or a detector.

A page of alarms reads the newest rows of a ``(…, ts, id)`` index; its bounded count (up to
10 000 rows) reads every matching entry. With only ``(stream, ts, id)``, a count of one stream's
alarms of one kind fetched each of the stream's rows from the table (a bitmap heap scan: 20-33 ms
on 100 000 alarms); with ``(stream, kind, ts, id)`` it is an index-only scan (about 1 ms).
``(stream, detector, ts, id)`` carries ``acknowledged_at`` (PostgreSQL ``INCLUDE``) so that the
"unacknowledged alarms of this detector" view is index-only too. Alarms are rare rows: two more
indexes cost their writers next to nothing. Measured with ``bench/bench_api.py``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 19:30:00+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_alarms_stream_kind_ts_id", "alarms", ["stream", "kind", "ts", "id"])
    op.create_index(
        "ix_alarms_stream_detector_ts_id",
        "alarms",
        ["stream", "detector", "ts", "id"],
        postgresql_include=["acknowledged_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_alarms_stream_detector_ts_id", table_name="alarms")
    op.drop_index("ix_alarms_stream_kind_ts_id", table_name="alarms")
