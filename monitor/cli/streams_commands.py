"""``monitor streams``: register, update, list and rebind streams."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from monitor.cli.common import UserError, safe_url
from monitor.settings import Settings


def add_streams(sub: Any) -> None:
    p = sub.add_parser("streams", help="register and list monitored streams")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = s.add_parser("create", help="register a stream with its calibration data")
    create.add_argument("config", help="stream configuration (YAML or JSON)")
    create.set_defaults(handler=_cmd_streams_create)
    update = s.add_parser(
        "update", help="store a changed configuration of a registered stream as a new version"
    )
    update.add_argument("config", help="stream configuration (YAML or JSON)")
    update.set_defaults(handler=_cmd_streams_update)
    lst = s.add_parser("list", help="list registered streams")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(handler=_cmd_streams_list)
    rebind = s.add_parser(
        "rebind", help="move a stream to another source of writes (consumer group, HTTP ingest)"
    )
    rebind.add_argument("stream")
    to = rebind.add_mutually_exclusive_group(required=True)
    to.add_argument("--group", help="Kafka consumer group (with --source, or the bound source)")
    to.add_argument("--http", action="store_true", help="HTTP ingest (POST /events)")
    to.add_argument("--file", metavar="PATH", help="a JSONL file source")
    rebind.add_argument("--source", help="source key, e.g. kafka:TOPIC (default: the bound one)")
    rebind.set_defaults(handler=_cmd_streams_rebind)


def _cmd_streams_create(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import register_stream_version
    from monitor.db.errors import StreamChangedError

    try:
        done = register_stream_version(args.config, settings)
    except StreamChangedError as exc:
        raise UserError(str(exc)) from None
    where = safe_url(settings.database_url)
    if done.outcome == "created":
        print(f"stream {done.name!r} registered in {where} (version {done.version})")
    else:
        print(f"stream {done.name!r} already registered with this configuration in {where} "
              f"(version {done.version}); nothing changed")
    return 0


def _cmd_streams_update(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import register_stream_version
    from monitor.db.errors import StreamNotFoundError

    try:
        done = register_stream_version(args.config, settings, update=True)
    except StreamNotFoundError as exc:
        raise UserError(f"{exc} with `monitor streams create CONFIG`") from None
    if done.outcome == "updated":
        print(f"stream {done.name!r} updated to version {done.version}")
    else:
        print(f"stream {done.name!r} unchanged at version {done.version}")
    return 0


def _cmd_streams_list(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import list_streams

    streams = list_streams(settings)
    if args.json:
        print(json.dumps(streams))
    else:
        for stream in streams:
            print(f"{stream['name']}\t{stream['task']}\tversion {stream['version']}")
    return 0


def _cmd_streams_rebind(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import rebind_stream
    from monitor.db.errors import StreamNotFoundError

    try:
        done = rebind_stream(settings, args.stream, group=args.group, source=args.source,
                             http=args.http, file=args.file)
    except (StreamNotFoundError, ValueError) as exc:
        raise UserError(str(exc)) from None
    print(f"stream {args.stream!r} is bound to {done.new} (was: {done.old or 'unbound'}); it "
          "goes on from its checkpoint with the records that writer reads next")
    if done.ahead:
        gaps = ", ".join(f"partition {p}: {a} → {b}" for p, (a, b) in done.ahead.items())
        print(f"warning: the new group has already read past the old one's positions ({gaps}); "
              "it resumes at its own, so the stream's records in between are processed by "
              "neither (docs/operations.md, \"A refused writer and replays\")", file=sys.stderr)
    return 0
