"""``monitor alarms list|show|ack`` and ``monitor report``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from monitor.cli.common import UserError, positive_int
from monitor.settings import Settings
from monitor.streams.records import ALARM_KINDS


def add_alarms(sub: Any) -> None:
    p = sub.add_parser("alarms", help="query stored alarms")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    lst = s.add_parser(
        "list", help="list alarms, newest first (their id column is what report --alarm takes)"
    )
    lst.add_argument("--stream")
    lst.add_argument("--kind", choices=ALARM_KINDS)
    lst.add_argument("--limit", type=positive_int, default=100)
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(handler=_cmd_alarms_list)
    show = s.add_parser("show", help="one alarm with its acknowledgement and every revision")
    show.add_argument("alarm", metavar="ID", help=_ID_HELP)
    show.add_argument("--json", action="store_true", help="one JSON object (as GET /alarms/ID)")
    show.set_defaults(handler=_cmd_alarms_show)
    ack = s.add_parser("ack", help="acknowledge an alarm (the first acknowledgement is kept)")
    ack.add_argument("alarm", metavar="ID", help=_ID_HELP)
    ack.add_argument("--by", help="who acknowledges it (default: cli:USER)")
    ack.add_argument("--json", action="store_true", help="one JSON object")
    ack.set_defaults(handler=_cmd_alarms_ack)


_ID_HELP = ("the alarm's id, or its first characters (at least 4; the id column of "
            "`monitor alarms list`)")


def _cmd_alarms_list(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import list_alarms

    alarms = list_alarms(settings, stream=args.stream, kind=args.kind, limit=args.limit)
    if args.json:
        print(json.dumps(alarms))
        return 0
    from rich.console import Console

    console = Console()
    console.print(_alarm_table(alarms, console.width))
    return 0


def _cmd_alarms_show(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import show_alarm

    alarm = show_alarm(settings, args.alarm)
    if args.json:
        print(json.dumps(alarm))
        return 0
    print(f"alarm {alarm['id']}")
    for key in ("stream", "detector", "kind", "event_id", "event_index", "ts", "changepoint",
                "rule", "statistic", "threshold", "acknowledged_at", "acknowledged_by"):
        print(f"  {key}: {alarm[key]}")
    for r in alarm["revisions"]:
        print(f"  revision {r['revision']}: {r['kind']}"
              + (f" (revised at {r['revised_at']})" if r["revised_at"] else ""))
    print("  (the evidence: --json, or the report: monitor report --alarm ID)")
    return 0


def _cmd_alarms_ack(args: argparse.Namespace, settings: Settings) -> int:
    import getpass

    from monitor.cli.runs import acknowledge

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        user = "unknown"
    done = acknowledge(settings, args.alarm, args.by or f"cli:{user}")
    if args.json:
        print(json.dumps(done))
    else:
        print(f"alarm {done['id']} acknowledged by {done['acknowledged_by']} at "
              f"{done['acknowledged_at']}")
    return 0


#: Terminals at least this wide get every column of the alarm table.


_WIDE_TABLE = 140
#: Narrower terminals get the statistic from this width on.
_STATISTIC_TABLE = 90


def _alarm_table(alarms: Sequence[dict[str, Any]], width: int) -> Any:
    """The alarms as a rich table for a terminal ``width`` columns wide.

    Below 140 columns only what tells alarms apart is kept, each on one line: the id's first
    8 characters (what ``monitor report --alarm`` takes), time (UTC, to the second), stream,
    kind (which implies the detector), event index, and from 90 columns the statistic; the
    event id, detector, changepoint and threshold are in the wide table and in ``--json``."""
    from rich import box
    from rich.table import Table

    from monitor.streams.alarm_ids import short_id

    wide = width >= _WIDE_TABLE
    table = Table(
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True
    )
    table.add_column("id", no_wrap=True)
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("stream", overflow="fold", min_width=6)
    if wide:
        table.add_column("detector", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("event", no_wrap=True, justify="right")
    if wide:
        table.add_column("changepoint", no_wrap=True, justify="right")
    statistic = width >= _STATISTIC_TABLE
    if statistic:
        table.add_column("statistic", no_wrap=True, justify="right")
    if wide:
        table.add_column("threshold", no_wrap=True, justify="right")
    for a in alarms:
        when = str(a["ts"]).replace("T", " ").removesuffix("Z")[:19]
        event = f"{a['event_id']} (#{a['event_index']})" if wide else f"#{a['event_index']}"
        cells = [short_id(a["id"]), when, a["stream"]]
        if wide:
            cells.append(a["detector"])
        cells += [a["kind"], event]
        if wide:
            cells.append(str(a["changepoint"]))
        if statistic:
            cells.append("-" if a["statistic"] is None else f"{a['statistic']:.4g}")
        if wide:
            cells.append(f"{a['threshold']:.4g}")
        table.add_row(*cells)
    return table


def add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="write one alarm's report: traces, diagnosis, evidence (HTML or PNG)"
    )
    p.add_argument("--alarm", required=True, metavar="ID", help=_ID_HELP)
    p.add_argument("--out", metavar="FILE", help="FILE.html or FILE.png "
                   "(default: alarm-ID.html in the current folder, with the whole id)")
    p.set_defaults(handler=_cmd_report)


def _cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import resolve_alarm
    from monitor.db.sink import DatabaseSink
    from monitor.ops.report import report_context, write_report

    if args.out and not args.out.lower().endswith((".html", ".htm", ".png")):
        raise UserError(f"--out must end in .html or .png, got {args.out!r}")
    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    with sink.sessions() as session:
        alarm_id = resolve_alarm(session, args.alarm)
        context = report_context(session, alarm_id)
    out = args.out or f"alarm-{alarm_id}.html"
    print(f"report of alarm {alarm_id}: {write_report(context, out)}")
    return 0

