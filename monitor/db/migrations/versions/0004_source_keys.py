"""Source names of any length: offsets and dead letters keep a bounded key and the whole name.

``source`` (VARCHAR 255) holds ``monitor.db.models.source_key(name)``: the name itself when it
fits, else a readable prefix and the SHA-256 of the whole name; the new ``source_name`` (TEXT)
holds the whole name. Rows stored before this revision have a name that fits, which is its own
key, and a NULL ``source_name``: they keep matching. A file source whose path made the name longer
than 255 characters crash-looped the worker before (``offset source is 272 characters long``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 15:00:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("source_offsets", "dead_letters"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("source_name", sa.Text(), nullable=True))


def downgrade() -> None:
    # Rows with a hashed key lose their whole name (their key still identifies them).
    for table in ("dead_letters", "source_offsets"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("source_name")
