"""Store checkpoint arrays uncompressed (PostgreSQL ``STORAGE EXTERNAL``).

Every batch rewrites each touched stream's checkpoint, whose ``arrays`` blob (an npz of float
arrays) grows to about 0.6 MB with the weighted monitor's reference. PostgreSQL tried to compress
it with pglz on every write: 20-40 ms of the server's time per checkpoint, for little gain on
float data, and most of a batch's transaction. ``EXTERNAL`` keeps it out of line (TOAST) without
compression: 4-6 ms. Rows already stored stay as they are until rewritten. SQLite has no such
setting: a no-op there.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 19:20:00+00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _set_storage(storage: str) -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE checkpoints ALTER COLUMN arrays SET STORAGE {storage}")


def upgrade() -> None:
    _set_storage("EXTERNAL")


def downgrade() -> None:
    _set_storage("EXTENDED")
