"""Stream configuration versions: ``streams.version`` (1 at registration, + 1 per explicit update).

Registering a name that is registered already no longer replaces its configuration (the same
configuration is accepted, another one refused); ``monitor streams update`` and
``PUT /streams/{name}`` store a changed configuration as the next version. Existing streams start
at version 1.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 15:30:00+00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), server_default="1", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("version")
