"""``monitor fleets``: create, list and run fleets."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from monitor.cli.common import UserError, alerts_argument, with_alerts
from monitor.settings import Settings


def add_fleets(sub: Any) -> None:
    p = sub.add_parser("fleets", help="groups of streams under one cross-stream alarm rule")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = s.add_parser("create", help="register a fleet from its YAML/JSON file")
    create.add_argument("config", help="fleet file: name, rule, alpha, members")
    create.set_defaults(handler=_cmd_fleets_create)
    lst = s.add_parser("list", help="list registered fleets, by name")
    lst.add_argument("--json", action="store_true", help="one JSON array of the fleets")
    lst.set_defaults(handler=_cmd_fleets_list)
    run = s.add_parser("run", help="decide the fleet's rule on the members' stored e-detectors")
    run.add_argument("name", help="fleet name")
    run.add_argument("--interval", type=float, default=10.0, help="seconds between evaluations")
    run.add_argument("--once", action="store_true", help="evaluate once and exit")
    alerts_argument(run)
    run.set_defaults(handler=_cmd_fleets_run)


def _cmd_fleets_create(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.db.fleet_runner import create_fleet, load_fleet_config
    from monitor.db.sink import DatabaseSink
    from monitor.streams.config import ConfigError

    try:
        config = load_fleet_config(args.config)
        with DatabaseSink(settings.database_url, settings.auto_migrate).sessions() as session:
            create_fleet(session, config.name, config.members, config.rule, config.alpha)
            session.commit()
    except (ConfigError, ValueError) as exc:
        raise UserError(str(exc)) from None
    print(f"fleet {config.name!r} registered: {config.rule} at level {config.alpha:g} over "
          f"{len(config.members)} members")
    return 0


def _cmd_fleets_list(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import list_fleets

    fleets = list_fleets(settings)
    if args.json:
        print(json.dumps(fleets))
        return 0
    for f in fleets:
        print(f"{f['name']}\t{f['rule']}\talpha {f['alpha']:g}\t{len(f['members'])} members\t"
              f"evaluated through {f['evaluated_through'] or '-'}")
    return 0


def _cmd_fleets_run(args: argparse.Namespace, settings: Settings) -> int:
    import time

    from monitor.alerts.routing import routing_from_settings
    from monitor.db.fleet_runner import FleetNotFoundError, evaluate_fleet
    from monitor.db.sink import DatabaseSink

    routing = routing_from_settings(with_alerts(args, settings))
    sessions = DatabaseSink(settings.database_url, settings.auto_migrate).sessions
    while True:
        with sessions() as session:
            try:
                alarms = evaluate_fleet(session, args.name, datetime.now(UTC), routing)
            except FleetNotFoundError as exc:
                raise UserError(f"{exc}: create it with `monitor fleets create FILE`") from None
            session.commit()
            for alarm in alarms:
                print(f"{alarm.ts.isoformat()} fleet alarm {alarm.stream}/{alarm.detector} "
                      f"R={alarm.statistic:.4g} >= {alarm.threshold:.4g} ({alarm.fleet_rule})")
        if args.once:
            return 0
        time.sleep(args.interval)
