"""Streams store their features' order as a list: ``streams.feature_names``.

A calibration with object features (``{"zeta": …, "alpha": …}``) was stored only as JSON
objects, and the order of the features was read back from the first row's keys. PostgreSQL's
JSONB keeps an object's keys in its own order (shorter keys first, then bytewise), so a worker
restarted on PostgreSQL read the features in another order than the one its checkpoint was
taken with, and stopped (``the state was taken with another window or other features``). From
this release the order is stored explicitly, per configuration version, and never read from an
object's keys.

The upgrade recovers each stream's order:

1. from its checkpoint, whose attribution state lists the features in the order the detectors
   were built with, when it names the calibration's features;
2. else, where no detector state depends on the order (no checkpoint, or one written under an
   earlier configuration version with other features), from the stored calibration's keys:
   exact on SQLite (JSON text keeps the order), JSONB's order on PostgreSQL (any fixed order
   is right there, since nothing was computed in another);
3. a checkpoint of the current version that names other features, or (on PostgreSQL) none at
   all, cannot be recovered: the column stays NULL, the upgrade logs one line naming the stream
   and the fix, and a worker refuses to run that stream (one line; its events become dead
   letters saying why, to replay after the fix) while the other streams go on. The fix is a
   new version, ``monitor streams update CONFIG.yaml``, which stores the order given.

Downgrading drops the column. (The offline SQL of ``alembic upgrade --sql`` adds the column but
cannot read the stored data to fill it.)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02 08:30:00+00:00
"""

import json
import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
STREAMS = sa.table(
    "streams",
    sa.column("name", sa.String(128)),
    sa.column("version", sa.Integer),
    sa.column("feature_names", JSON),
)
CALIBRATION = sa.table(
    "calibration_events",
    sa.column("stream", sa.String(128)),
    sa.column("idx", sa.Integer),
    sa.column("features", JSON),
)
CHECKPOINTS = sa.table("checkpoints", sa.column("stream", sa.String(128)), sa.column("state", sa.Text))


def upgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.add_column(sa.Column("feature_names", JSON, nullable=True))
    if op.get_context().as_sql:  # offline SQL cannot read the stored calibrations
        return
    bind = op.get_bind()
    orders = {name: _order(bind, name, version) for name, version in
              bind.execute(sa.select(STREAMS.c.name, STREAMS.c.version)).all()}
    for name, order in orders.items():
        if order is not None:
            bind.execute(STREAMS.update().where(STREAMS.c.name == name)
                         .values(feature_names=order))


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("feature_names")


def _order(bind: sa.Connection, name: str, version: int) -> list[str] | None:
    """The stream's feature order (``None``: list features), or a refusal."""
    first = bind.execute(
        sa.select(CALIBRATION.c.features).where(CALIBRATION.c.stream == name)
        .order_by(CALIBRATION.c.idx).limit(1)
    ).scalar()
    if not isinstance(first, dict):
        return None
    stored = [str(key) for key in first]
    taken, taken_version = _checkpoint_order(bind, name)
    if taken is not None and sorted(taken) == sorted(stored):
        return taken
    if taken_version == version and (taken is not None or bind.dialect.name != "sqlite"):
        log.warning(_unrecovered(name, version, stored, taken))
        return None
    return stored


def _checkpoint_order(bind: sa.Connection, name: str) -> tuple[list[str] | None, int | None]:
    """The feature names the stream's checkpoint was taken with (``None`` if it names none) and
    the configuration version it was taken under (``None``: no checkpoint)."""
    text = bind.execute(
        sa.select(CHECKPOINTS.c.state).where(CHECKPOINTS.c.stream == name)
    ).scalar()
    if text is None:
        return None, None
    # monitor.streams.state's format, {"format": 1, "state": <Checkpoint payload>}, whose payload is
    # {"state": <the stream's state>, "arrays": ...}; the names are a plain JSON list in it.
    state: dict[str, Any] = json.loads(text)["state"]["state"]
    attribution = state.get("attribution")
    names = attribution.get("feature_names") if isinstance(attribution, dict) else None
    version = int(state.get("config_version", 1))
    return (None if names is None else [str(n) for n in names]), version


def _unrecovered(name: str, version: int, stored: list[str], taken: list[str] | None) -> str:
    found = "names no features" if taken is None else f"names other ones ({', '.join(taken)})"
    return (
        f"stream {name!r}: the order of its features ({', '.join(sorted(stored))}) in "
        f"configuration version {version} cannot be recovered (its checkpoint {found}); "
        "workers will not run it until `monitor streams update CONFIG.yaml` stores the order"
    )
