"""The ``monitor`` command line.

The only place besides the API's app factory that reads :class:`~monitor.settings.Settings`.
Heavy modules are imported inside each command so that ``--help`` stays instant.

Every mistake a user can fix at start-up (a bad option, setting, database URL, token list or
configuration file; an unreachable database) ends in one line on stderr saying what to do, with
exit code 2 (usage and configuration) or 1 (the database or a source cannot be reached); never a
traceback. Only a bug prints one.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

from monitor.core.diagnosis import ALARM_KINDS
from monitor.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], int]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``monitor`` console script; returns the process exit code."""
    try:
        args = _parser().parse_args(argv)
        settings = _settings(args.db)
    except UserError as exc:
        print(f"monitor: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("psycopg").addFilter(_not_pipeline_cleanup)
    handler: Handler = args.handler
    try:
        return handler(args, settings)
    except KeyboardInterrupt:
        return 130
    except UserError as exc:
        print(f"monitor: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        explained = _explain(exc, settings)
        if explained is None:
            raise
        code, message = explained
        print(f"monitor: error: {message}", file=sys.stderr)
        return code


def _not_pipeline_cleanup(record: logging.LogRecord) -> bool:
    """Drop psycopg's warning that ending a batch insert's pipeline failed too: it follows the
    error being raised (printed as one line) and would be a second line about the same failure."""
    return not str(record.msg).startswith("error ignored terminating")


class UserError(Exception):
    """A problem the user can fix (bad file, bad configuration); printed without a traceback."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``main`` prints it, exit code 2)."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def _settings(db: str | None) -> Settings:
    """The settings of the environment (and ``--db``); a bad value is one line naming it."""
    from pydantic import ValidationError

    try:
        settings = Settings()
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            field = "_".join(str(part) for part in error["loc"])
            problems.append(
                f"MONITOR_{field.upper()}={error.get('input')!r}: {error['msg'].lower()}"
            )
        raise UserError(
            "bad setting " + "; ".join(problems) + " (fix or unset the environment variable)"
        ) from None
    if db:
        settings = settings.model_copy(update={"database_url": db})
    from monitor.db.engine import normalise_url

    try:
        normalise_url(settings.database_url)
    except Exception as exc:  # ArgumentError, ValueError (a bad port), UnsupportedDatabaseError
        raise UserError(_bad_url(settings.database_url, exc)) from None
    return settings


def _bad_url(url: str, exc: Exception) -> str:
    shown = url if "@" not in url else _safe_url(url)
    return (
        f"bad database URL {shown!r} ({_first_line(exc)}): give --db or MONITOR_DATABASE_URL as "
        "postgresql+psycopg://USER@HOST:PORT/DB or sqlite:///PATH"
    )


def _explain(exc: Exception, settings: Settings) -> tuple[int, str] | None:
    """(exit code, one-line message) of an error a user can act on; ``None`` for a bug.

    Configuration, source, database and worker errors are printed as one line, exit code 1
    (2 for mistakes in what was given: URL, token list, configuration); never a traceback."""
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from connectors.errors import SourceError
    from monitor.api.auth import TokenConfigError
    from monitor.db.errors import UnsupportedDatabaseError
    from monitor.engine.worker import WorkerError
    from monitor.streams.calibration import CalibrationError
    from monitor.streams.config import ConfigError
    from monitor.streams.setup import RunError

    if isinstance(exc, ConfigError | CalibrationError | TokenConfigError):
        return 2, _one_line(exc)
    if isinstance(exc, SourceError | WorkerError | RunError):
        return 1, _one_line(exc)
    if isinstance(exc, ArgumentError | UnsupportedDatabaseError):
        return 2, _bad_url(settings.database_url, exc)
    if isinstance(exc, DBAPIError):
        return 1, _database_failure(exc, settings.database_url)
    return None


def _database_failure(exc: Exception, url: str) -> str:
    """One line: where, the cause and what to do (never the statement or its parameters; the
    traceback goes to the log at DEBUG)."""
    from monitor.db.errors import database_fault

    logging.getLogger("monitor.cli.main").debug("database error", exc_info=exc)
    fault = database_fault(exc)
    assert fault is not None  # a DBAPIError
    if fault.connecting:
        return f"cannot connect to the database at {_safe_url(url)} ({fault.cause}): {fault.remedy}"
    return f"the database at {_safe_url(url)} failed: {fault}"


def _one_line(exc: BaseException) -> str:
    """The message of ``exc`` with its lines joined (pydantic's are several)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__


def _first_line(exc: BaseException | None) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"a port is between 0 and 65535, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="monitor",
        description="Online ML monitoring with anytime-valid sequential tests.",
    )
    parser.add_argument("--db", help=_DB_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    _add_streams(sub)
    _add_alarms(sub)
    _add_fleets(sub)
    _add_report(sub)
    _add_dead_letters(sub)
    _add_db(sub)
    _add_serve(sub)
    _add_dashboards(sub)
    _add_demo(sub)
    _add_bench(sub)
    _db_everywhere(parser)
    return parser


_DB_HELP = "database URL (default: MONITOR_DATABASE_URL or sqlite:///./monitor.db)"


def _db_everywhere(parser: argparse.ArgumentParser) -> None:
    """Accept ``--db`` after any subcommand too (``monitor alarms list --db URL``).

    Each subcommand's copy has no default (``SUPPRESS``), so it sets ``args.db`` only when given
    and never overwrites a ``--db`` given before the subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in dict.fromkeys(action.choices.values()):
                if "--db" not in subparser._option_string_actions:
                    subparser.add_argument("--db", default=argparse.SUPPRESS, help=_DB_HELP)
                _db_everywhere(subparser)


def _add_run(sub: Any) -> None:
    p = sub.add_parser(
        "run", help="process a source of events (file to its end; Kafka until stopped)"
    )
    p.add_argument(
        "--source", required=True, help="file:EVENTS.jsonl or kafka://HOST:PORT/TOPIC[,TOPIC]"
    )
    p.add_argument(
        "--config", action="append", default=[], help="stream configuration (repeatable)"
    )
    p.add_argument("--group", default="monitor", help="Kafka consumer group (default: monitor)")
    p.add_argument("--json", action="store_true", help="end with a machine-readable summary")
    p.add_argument("--no-store", action="store_true", help="do not persist to the database")
    _alerts_argument(p)
    p.add_argument(
        "--batch-size", type=_positive_int, default=None, help="records per transaction"
    )
    p.add_argument(
        "--checkpoint-every",
        type=_positive_int,
        default=None,
        help="store detector states and offsets every N batches (default: "
        "MONITOR_CHECKPOINT_EVERY or 5; results are stored every batch)",
    )
    p.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        help="serve /healthz and /metrics of this worker on this port (default: "
        "MONITOR_WORKER_METRICS_PORT; off when neither is set)",
    )
    p.set_defaults(handler=_cmd_run)


def _add_streams(sub: Any) -> None:
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


def _add_alarms(sub: Any) -> None:
    p = sub.add_parser("alarms", help="query stored alarms")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    lst = s.add_parser("list", help="list alarms, newest first")
    lst.add_argument("--stream")
    lst.add_argument("--kind", choices=ALARM_KINDS)
    lst.add_argument("--limit", type=_positive_int, default=100)
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(handler=_cmd_alarms_list)


def _add_fleets(sub: Any) -> None:
    p = sub.add_parser("fleets", help="groups of streams under one cross-stream alarm rule")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = s.add_parser("create", help="register a fleet from its YAML/JSON file")
    create.add_argument("config", help="fleet file: name, rule, alpha, members")
    create.set_defaults(handler=_cmd_fleets_create)
    run = s.add_parser("run", help="decide the fleet's rule on the members' stored e-detectors")
    run.add_argument("name", help="fleet name")
    run.add_argument("--interval", type=float, default=10.0, help="seconds between evaluations")
    run.add_argument("--once", action="store_true", help="evaluate once and exit")
    _alerts_argument(run)
    run.set_defaults(handler=_cmd_fleets_run)


def _add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="write one alarm's report: traces, diagnosis, evidence (HTML or PNG)"
    )
    p.add_argument("--alarm", required=True, metavar="ID", help="the alarm's id")
    p.add_argument("--out", metavar="FILE", help="FILE.html or FILE.png "
                   "(default: alarm-ID.html in the current folder)")
    p.set_defaults(handler=_cmd_report)


def _iso_time(text: str) -> datetime:
    """An ISO 8601 time (``Z`` accepted); one without a zone is UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (e.g. 2026-12-01T09:00:00Z)"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _add_dead_letters(sub: Any) -> None:
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
        q.add_argument("--since", type=_iso_time, help="record time at or after this ISO time")
        q.add_argument("--reason-contains", metavar="TEXT", help="reason contains TEXT (any case)")
    lst.add_argument("--limit", type=_positive_int, default=100)
    lst.add_argument("--json", action="store_true", help="one JSON object per line")
    lst.set_defaults(handler=_cmd_dead_letters_list)
    replay.add_argument(
        "--dry-run", action="store_true", help="report what would be replayed; change nothing"
    )
    replay.add_argument("--json", action="store_true", help="a machine-readable report")
    replay.set_defaults(handler=_cmd_dead_letters_replay)


def _add_db(sub: Any) -> None:
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


def _add_serve(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve the HTTP API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8000)
    p.add_argument(
        "--workers",
        type=int,
        help="worker processes (default: MONITOR_API_WORKERS or 1; one per core is usual)",
    )
    _alerts_argument(p)
    p.set_defaults(handler=_cmd_serve)


def _alerts_argument(p: Any) -> None:
    p.add_argument(
        "--alerts",
        metavar="FILE",
        help="alert routing file, YAML or JSON (default: MONITOR_ALERTS_FILE; "
        "docs/operations.md, \"Alert routing\")",
    )


def _with_alerts(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` with ``--alerts``, checked now: a bad routing file is one line, exit 2."""
    from monitor.alerts import AlertRoutingError, load_alert_routing
    from monitor.alerts.webhooks import webhook_urls

    if getattr(args, "alerts", None):
        settings = settings.model_copy(update={"alerts_file": args.alerts})
    try:
        load_alert_routing(settings.alerts_file, webhook_urls(settings.webhook_urls))
    except AlertRoutingError as exc:
        raise UserError(str(exc)) from None
    return settings


def _add_dashboards(sub: Any) -> None:
    p = sub.add_parser("dashboards", help="Grafana dashboards")
    s = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    push = s.add_parser("push", help="create or update the dashboards and datasource in Grafana")
    push.add_argument("--grafana-url", required=True)
    push.add_argument("--token", help="Grafana service-account token (or GRAFANA_TOKEN)")
    push.add_argument("--user", help="basic-auth user (with --password)")
    push.add_argument("--password", help="basic-auth password")
    push.add_argument("--prometheus-url", help="Prometheus URL for the panels fed by /metrics")
    push.add_argument(
        "--datasource-db",
        metavar="URL",
        help="database URL Grafana's datasource connects with, as Grafana reaches it: the "
        "read-only reader role (or MONITOR_GRAFANA_DATABASE_URL); without it the datasource is "
        "left as it is (--db is never handed to Grafana)",
    )
    push.set_defaults(handler=_cmd_dashboards_push)


def _add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="the whole pipeline on embedded defaults and real bundled data")
    p.add_argument("--out", default="demo-out", help="folder for the generated stream and plot")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--serve", action="store_true", help="keep the API up on the demo database")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=_cmd_demo)


def _add_bench(sub: Any) -> None:
    p = sub.add_parser("bench", help="throughput and statistical benchmarks")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="reduced sizes (seconds)")
    p.set_defaults(handler=_cmd_bench)


def _safe_url(url: str) -> str:
    """The database URL with any password masked, for printing."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is reported by the command itself
        return "<database>"


# -- commands ----------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import run_source

    settings = _with_alerts(args, settings)
    summary = run_source(
        source_url=args.source,
        configs=args.config,
        group=args.group,
        settings=settings,
        store=not args.no_store,
        batch_size=args.batch_size or settings.batch_size,
        checkpoint_every=args.checkpoint_every or settings.checkpoint_every,
        on_alarm=lambda alarm: print(json.dumps(alarm.to_json()), flush=True),
        metrics_port=_metrics_port(args.metrics_port),
        health_bound_s=float(os.environ.get("MONITOR_WORKER_HEALTH_BOUND_S") or 30.0),
    )
    if args.json:
        print(json.dumps(summary.to_json()))
    else:
        summary.print_human(sys.stderr)
    return 0


def _metrics_port(given: int | None) -> int | None:
    """``--metrics-port``, else ``MONITOR_WORKER_METRICS_PORT``, else None (no server)."""
    if given is not None:
        return given
    text = os.environ.get("MONITOR_WORKER_METRICS_PORT", "").strip()
    if not text:
        return None
    try:
        return _port(text)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"monitor: MONITOR_WORKER_METRICS_PORT: {exc}") from None


def _cmd_streams_create(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import register_stream_version
    from monitor.db.errors import StreamChangedError

    try:
        done = register_stream_version(args.config, settings)
    except StreamChangedError as exc:
        raise UserError(str(exc)) from None
    where = _safe_url(settings.database_url)
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


def _cmd_fleets_run(args: argparse.Namespace, settings: Settings) -> int:
    import time
    from datetime import UTC, datetime

    from monitor.alerts.routing import routing_from_settings
    from monitor.db.fleet_runner import FleetNotFoundError, evaluate_fleet
    from monitor.db.sink import DatabaseSink

    routing = routing_from_settings(_with_alerts(args, settings))
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


#: Terminals at least this wide get every column of the alarm table.
_WIDE_TABLE = 120


def _alarm_table(alarms: Sequence[dict[str, Any]], width: int) -> Any:
    """The alarms as a rich table for a terminal ``width`` columns wide.

    Below 120 columns only what tells alarms apart is kept, each on one line: time (UTC, to
    the second), stream, kind (which implies the detector), event index and statistic; the
    event id, detector, changepoint and threshold are in the wide table and in ``--json``."""
    from rich import box
    from rich.table import Table

    wide = width >= _WIDE_TABLE
    table = Table(
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True
    )
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("stream", overflow="fold", min_width=6)
    if wide:
        table.add_column("detector", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("event", no_wrap=True, justify="right")
    if wide:
        table.add_column("changepoint", no_wrap=True, justify="right")
    table.add_column("statistic", no_wrap=True, justify="right")
    if wide:
        table.add_column("threshold", no_wrap=True, justify="right")
    for a in alarms:
        when = str(a["ts"]).replace("T", " ").removesuffix("Z")[:19]
        event = f"{a['event_id']} (#{a['event_index']})" if wide else f"#{a['event_index']}"
        statistic = "-" if a["statistic"] is None else f"{a['statistic']:.4g}"
        cells = [when, a["stream"]]
        if wide:
            cells.append(a["detector"])
        cells += [a["kind"], event]
        if wide:
            cells.append(str(a["changepoint"]))
        cells.append(statistic)
        if wide:
            cells.append(f"{a['threshold']:.4g}")
        table.add_row(*cells)
    return table


def _cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.db.errors import AlarmNotFoundError
    from monitor.db.sink import DatabaseSink
    from monitor.ops.report import report_context, write_report

    out = args.out or f"alarm-{args.alarm}.html"
    if not out.lower().endswith((".html", ".htm", ".png")):
        raise UserError(f"--out must end in .html or .png, got {out!r}")
    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    with sink.sessions() as session:
        try:
            context = report_context(session, args.alarm)
        except AlarmNotFoundError as exc:
            raise UserError(f"{exc} (see `monitor alarms list`)") from None
    print(f"report of alarm {args.alarm}: {write_report(context, out)}")
    return 0


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
        for letter in letters:
            print(json.dumps(letter))
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
    from monitor.db.sink import DatabaseSink
    from monitor.db.store import CheckpointMovedError
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


def _cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.db.migrate import upgrade

    upgrade(settings.database_url, args.revision)
    print(f"database {_safe_url(settings.database_url)} at revision {args.revision}")
    return 0


def _cmd_db_downgrade(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.db.migrate import downgrade

    downgrade(settings.database_url, args.revision)
    print(f"database {_safe_url(settings.database_url)} at revision {args.revision}")
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


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from monitor.api import create_app
    from monitor.api.app import guard_limits
    from monitor.api.guard import GuardedHttpToolsProtocol, configure

    settings = _with_alerts(args, settings)
    workers = settings.api_workers if args.workers is None else args.workers
    if workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "log_level": "info",
        "access_log": settings.api_access_log,
        # Slow or idle clients cannot starve the others (monitor/api/guard.py): header and body
        # timeouts, a header size limit and an evicting connection cap, plus uvicorn's keep-alive
        # timeout. uvicorn's limit_concurrency is not used: it answers 503 to every new request
        # once that many connections are open, which is what a slow-connection flood wants.
        "http": GuardedHttpToolsProtocol,
        "timeout_keep_alive": settings.api_keep_alive_timeout,
        "h11_max_incomplete_event_size": settings.api_max_header_bytes,
        "backlog": 2048,
    }
    if workers == 1:
        configure(guard_limits(settings))
        uvicorn.run(create_app(settings), **options)
        return 0
    _prepare_workers(settings)
    # Each worker process imports the app factory and reads its settings from the environment.
    uvicorn.run("monitor.api.app:app_from_environment", factory=True, workers=workers, **options)
    return 0


def _prepare_workers(settings: Settings) -> None:
    """Check the token list, migrate once (not once per worker) and hand the settings to the
    worker processes."""
    from monitor.api.auth import TokenStore

    TokenStore.from_setting(settings.api_tokens)  # a bad list is one line here, not N tracebacks
    if settings.auto_migrate:
        from monitor.db.migrate import upgrade

        upgrade(settings.database_url)
    os.environ["MONITOR_DATABASE_URL"] = settings.database_url  # it may come from --db
    os.environ["MONITOR_AUTO_MIGRATE"] = "false"
    os.environ["MONITOR_ALERTS_FILE"] = settings.alerts_file  # it may come from --alerts


def _cmd_dashboards_push(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.ops.dashboards import POSTGRES_UID, DashboardPushError, push_dashboards

    datasource = args.datasource_db or os.environ.get("MONITOR_GRAFANA_DATABASE_URL") or None
    try:
        pushed = push_dashboards(
            args.grafana_url,
            token=args.token or os.environ.get("GRAFANA_TOKEN") or None,
            user=args.user,
            password=args.password,
            database_url=datasource,
            prometheus_url=args.prometheus_url,
        )
    except DashboardPushError as exc:
        raise UserError(str(exc)) from None
    for uid in pushed:
        print(f"dashboard {uid} pushed to {args.grafana_url}")
    if datasource is None:
        print(
            f"datasource {POSTGRES_UID} left as it is: pass --datasource-db with the read-only "
            "reader's URL to create or update it (docs/dashboards.md)"
        )
    return 0


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.demo import run_demo

    return run_demo(args.out, settings, seed=args.seed, serve=args.serve, as_json=args.json)


def _cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.ops.benchmarks import run_benchmarks

    return run_benchmarks(settings, quick=args.quick, as_json=args.json)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
