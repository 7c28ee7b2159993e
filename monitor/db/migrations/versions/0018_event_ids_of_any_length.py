"""Event ids of any length: the whole id where it is shown, a bounded key where it is a key.

Ids were refused at decoding beyond 255 characters, and the store refused an alarm or an OOD
flag naming a longer one. From this revision:

- ``alarms.event_id`` and ``calibration_events.event_id`` (shown to users, never keys) become
  TEXT: they hold the whole id. On PostgreSQL VARCHAR to TEXT rewrites nothing;
- ``ood_flags.event_id`` (part of the primary key) keeps VARCHAR(255) and holds
  ``monitor.db.models.event_key(id)``: the id itself when it fits, else a readable prefix and
  the SHA-256 of the whole id; the new ``full_event_id`` (TEXT) holds the whole id when the key
  is not the id, NULL otherwise. Every row stored before has an id that fits, its own key.

``ingested_events.event_id`` held such a key already. The downgrade cuts longer ids in
``alarms`` and ``calibration_events`` to their first 255 characters (the older release shows
them so) and drops ``full_event_id`` (the flags keep their keys).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02 14:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Tables whose ``event_id`` holds the whole id from this revision on.
WHOLE_IDS = ("alarms", "calibration_events")


def upgrade() -> None:
    for table in WHOLE_IDS:
        with op.batch_alter_table(table) as batch:
            batch.alter_column("event_id", type_=sa.Text(), existing_type=sa.String(255))
    with op.batch_alter_table("ood_flags") as batch:
        batch.add_column(sa.Column("full_event_id", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ood_flags") as batch:
        batch.drop_column("full_event_id")
    for table in WHOLE_IDS:
        rows = sa.table(table, sa.column("event_id", sa.Text()))
        op.execute(
            rows.update()
            .where(sa.func.length(rows.c.event_id) > 255)
            .values(event_id=sa.func.substr(rows.c.event_id, 1, 255))
        )
        with op.batch_alter_table(table) as batch:
            batch.alter_column("event_id", type_=sa.String(255), existing_type=sa.Text())
