"""``monitor db``: upgrade, downgrade and prune the database."""

from __future__ import annotations

import argparse
import json
from typing import Any

from monitor.cli.common import UserError, safe_url
from monitor.settings import Settings


def add_db(sub: Any) -> None:
    p = sub.add_parser("db", help="database migrations")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = s.add_parser("upgrade", help="alembic upgrade to head")
    up.add_argument("revision", nargs="?", default="head")
    up.set_defaults(handler=_cmd_db_upgrade)
    down = s.add_parser("downgrade", help="alembic downgrade")
    down.add_argument("revision")
    down.set_defaults(handler=_cmd_db_downgrade)
    prune = s.add_parser(
        "prune", help="delete results older than each stream's retention policy"
    )
    prune.add_argument("--batch", type=int, default=5000, help="rows per delete transaction")
    prune.add_argument("--json", action="store_true")
    prune.set_defaults(handler=_cmd_db_prune)


def _cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.db.migrate import upgrade

    upgrade(settings.database_url, args.revision)
    print(f"database {safe_url(settings.database_url)} at revision {args.revision}")
    return 0


def _cmd_db_downgrade(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.db.migrate import downgrade

    downgrade(settings.database_url, args.revision)
    print(f"database {safe_url(settings.database_url)} at revision {args.revision}")
    return 0


def _cmd_db_prune(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.db.retention import prune
    from monitor.db.sink import DatabaseSink

    if args.batch < 1:
        raise UserError(f"--batch must be at least 1, got {args.batch}")
    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    report = prune(sink.sessions, batch=args.batch)
    if args.json:
        print(json.dumps({"deleted": report.deleted, "transactions": report.transactions}))
    else:
        rows = ", ".join(f"{n} {table}" for table, n in report.deleted.items())
        print(f"pruned {rows} in {report.transactions} transactions")
    return 0
