"""One time base: ingest time beside event time, and where a dead letter's time came from.

Every stored row of a prediction (trace points of both detectors, alarms, OOD windows) carries
the prediction's event time in ``ts``; ``created_at`` is when it was stored (alarms and dead
letters had it already; trace points and OOD windows gain it: rows stored before this revision
get the time of the upgrade). ``dead_letters.ts_source`` says whether a dead letter's ``ts`` is
its record's own event time (``event``), the broker's timestamp (``broker``) or the ingest time
(``ingest``); NULL on older rows.

Revision ID: 0013
Revises: 0011
Create Date: 2026-12-01 19:00:00+00:00
"""

from collections.abc import Sequence
from typing import Literal

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # SQLite cannot ADD COLUMN with a non-constant default: its batch mode rebuilds the table.
    recreate: Literal["always", "auto"] = (
        "always" if op.get_bind().dialect.name == "sqlite" else "auto"
    )
    for table in ("trace_points", "ood_windows"):
        with op.batch_alter_table(table, recreate=recreate) as batch:
            batch.add_column(
                sa.Column(
                    "created_at",
                    sa.TIMESTAMP(timezone=True),
                    server_default=sa.func.now(),
                    nullable=False,
                )
            )
    with op.batch_alter_table("dead_letters") as batch:
        batch.add_column(sa.Column("ts_source", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("dead_letters") as batch:
        batch.drop_column("ts_source")
    for table in ("ood_windows", "trace_points"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("created_at")
