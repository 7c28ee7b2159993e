"""``monitor dead-letters``: list and replay dead letters."""

from __future__ import annotations

import argparse
import json
from typing import Any

from monitor.cli.common import UserError, iso_time, positive_int
from monitor.settings import Settings


def add_dead_letters(sub: Any) -> None:
    p = sub.add_parser("dead-letters", help="list and replay records that could not be processed")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    lst = s.add_parser("list", help="list dead letters, newest first")
    replay = s.add_parser(
        "replay",
        help="process stored dead letters again (e.g. after registering their stream)",
    )
    for q in (lst, replay):
        q.add_argument("--stream", help="of this stream (stored, or named by the record)")
        q.add_argument("--source", help="of this source (e.g. kafka:predictions)")
        q.add_argument("--since", type=iso_time, help="record time at or after this ISO time")
        q.add_argument("--reason-contains", metavar="TEXT", help="reason contains TEXT (any case)")
    lst.add_argument("--limit", type=positive_int, default=100)
    lst.add_argument("--json", action="store_true", help="one JSON array of the dead letters")
    lst.set_defaults(handler=_cmd_dead_letters_list)
    replay.add_argument(
        "--dry-run", action="store_true", help="report what would be replayed; change nothing"
    )
    replay.add_argument("--json", action="store_true", help="a machine-readable report")
    replay.set_defaults(handler=_cmd_dead_letters_replay)


def _dead_letter_filter(args: argparse.Namespace) -> Any:
    from monitor.cli.dead_letters import DeadLetterFilter

    return DeadLetterFilter(
        stream=args.stream,
        source=args.source,
        since=args.since,
        reason_contains=args.reason_contains,
    )


def _cmd_dead_letters_list(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.dead_letters import list_dead_letters
    from monitor.db.sink import DatabaseSink

    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    try:
        letters = list_dead_letters(sink, _dead_letter_filter(args), limit=args.limit)
    finally:
        sink.close()
    if args.json:
        print(json.dumps(letters))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("ts", "id", "stream", "where", "reason", "payload")
    for d in letters:
        stream = d["stream"] or (f"({d['payload_stream']})" if d["payload_stream"] else "")
        payload = d["payload"] if len(d["payload"]) <= 40 else d["payload"][:39] + "…"
        table.add_row(
            d["ts"][:19], str(d["id"]), stream, f"{d['source']} [{d['partition']}]@{d['offset']}",
            d["reason"], payload,
        )
    Console().print(table)
    return 0


#: Why a replay skips a dead letter, by :attr:`monitor.cli.dead_letters.ReplaySkip.rule`.


_SKIP_WHY = {
    "refused_writer": "stored by a writer refused for the stream; the stream's own writer reads "
                      "these records, so replaying them would count them twice",
    "already_processed": "the stream has already processed an event of the same kind and id "
                         "within its label-join window",
}


def _print_skipped(report: Any, verb: str) -> None:
    """One line per rule and stream: how many dead letters a replay skips, and why."""
    for (rule, stream), n in report.skipped_by().items():
        print(f"  {n} {verb} ({stream or 'no stream'}): {_SKIP_WHY[rule]}")


def _cmd_dead_letters_replay(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.alerts import AlertRoutingError, routing_from_settings
    from monitor.cli.dead_letters import replay_dead_letters
    from monitor.db.replay_store import CheckpointMovedError
    from monitor.db.sink import DatabaseSink
    from monitor.streams.setup import RunError

    try:  # alarms raised by the replay are queued for the receivers; a worker or API sends them
        routing = routing_from_settings(settings)
    except AlertRoutingError as exc:
        raise UserError(str(exc)) from None
    sink = DatabaseSink(settings.database_url, settings.auto_migrate, routing=routing)
    try:
        report = replay_dead_letters(
            sink,
            _dead_letter_filter(args),
            dry_run=args.dry_run,
            max_event_bytes=settings.max_event_bytes,
        )
    except CheckpointMovedError as exc:
        raise RunError(f"replay stopped: {exc} (earlier batches are stored)") from None
    finally:
        sink.close()
    if args.json:
        print(json.dumps(report.to_json()))
        return 0
    failed = len(report.failures)
    if args.dry_run:
        print(f"dry run: {report.replayed} of {report.matched} dead letters would be replayed, "
              f"{failed} would still fail, {report.skipped} would be skipped; nothing was "
              "changed")
    else:
        print(f"replayed {report.replayed} of {report.matched} dead letters "
              f"({failed} failed again and stay dead letters, {report.skipped} skipped and stay "
              "as they are)")
    for name, n in sorted(report.by_stream.items()):
        print(f"  {name}: {n} events")
    _print_skipped(report, "would be skipped" if args.dry_run else "skipped")
    if report.failures:
        from rich.console import Console
        from rich.table import Table

        table = Table("id", "stream", "where", "reason")
        for f in report.failures:
            table.add_row(
                str(f.id), f.stream or "", f"{f.source} [{f.partition}]@{f.offset}", f.reason
            )
        Console().print(table)
    return 0
