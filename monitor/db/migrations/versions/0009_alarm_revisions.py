"""Alarm revisions: ``alarms.revision`` / ``alarms.revised_at`` and the ``alarm_revisions`` table.

An alarm raised with too little evidence (kind ``insufficient_evidence``) is revised once the
next events complete its evidence (docs/detectors.md, "Diagnosis"). The alarm's row holds its
latest version (kind, evidence, revision, revised_at); ``alarm_revisions`` keeps every version,
revision 1 included. Alarms stored before this revision are revision 1 (backfilled).

Revision ID: 0009
Revises: 0013
Create Date: 2026-12-01 18:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TS = sa.TIMESTAMP(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("alarms") as batch:
        batch.add_column(
            sa.Column("revision", sa.Integer(), server_default="1", nullable=False)
        )
        batch.add_column(sa.Column("revised_at", TS, nullable=True))
        batch.create_index("ix_alarms_revised_at_id", ["revised_at", "id"])
    op.create_table(
        "alarm_revisions",
        sa.Column("alarm_id", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("evidence", JSON, nullable=False),
        sa.Column("revised_at", TS, nullable=True),
        sa.Column("created_at", TS, server_default=sa.text("CURRENT_TIMESTAMP"), nullable=False),
        sa.ForeignKeyConstraint(
            ["alarm_id"], ["alarms.id"], name="fk_alarm_revisions_alarm_id_alarms",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("alarm_id", "revision", name="pk_alarm_revisions"),
    )
    op.execute(
        "INSERT INTO alarm_revisions (alarm_id, revision, kind, evidence, created_at) "
        "SELECT id, 1, kind, evidence, created_at FROM alarms"
    )


def downgrade() -> None:
    op.drop_table("alarm_revisions")
    with op.batch_alter_table("alarms") as batch:
        batch.drop_index("ix_alarms_revised_at_id")
        batch.drop_column("revised_at")
        batch.drop_column("revision")
