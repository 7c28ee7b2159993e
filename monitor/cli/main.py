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
import logging
import sys
from collections.abc import Sequence

from monitor.cli.alarms_commands import add_alarms, add_report
from monitor.cli.common import (
    DB_HELP,
    Handler,
    Parser,
    UserError,
    VersionAction,
    db_everywhere,
    first_line,
    one_line,
    safe_url,
)
from monitor.cli.database_commands import add_db
from monitor.cli.fleets_commands import add_fleets
from monitor.cli.init_commands import add_init
from monitor.cli.letters_commands import add_dead_letters
from monitor.cli.run_commands import add_run
from monitor.cli.serve_commands import add_dashboards, add_serve
from monitor.cli.streams_commands import add_streams
from monitor.cli.tools_commands import add_bench, add_demo
from monitor.errors import missing_extra
from monitor.settings import Settings


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``monitor`` console script; returns the process exit code."""
    try:
        args = _parser().parse_args(argv)
    except UserError as exc:
        print(f"monitor: error: {exc}", file=sys.stderr)
        return 2
    try:
        return _run(args)
    except ModuleNotFoundError as exc:
        # The commands need the server extra (and PostgreSQL, Kafka theirs): a core install
        # says which one to install instead of a traceback.
        missing = missing_extra(exc, f"monitor {args.command}")
        if missing is None:
            raise
        print(f"monitor: error: {missing}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    try:
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
    shown = url if "@" not in url else safe_url(url)
    return (
        f"bad database URL {shown!r} ({first_line(exc)}): give --db or MONITOR_DATABASE_URL as "
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
        return 2, one_line(exc)
    if isinstance(exc, SourceError | WorkerError | RunError):
        return 1, one_line(exc)
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
        return f"cannot connect to the database at {safe_url(url)} ({fault.cause}): {fault.remedy}"
    return f"the database at {safe_url(url)} failed: {fault}"


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="monitor",
        description="Online ML monitoring with anytime-valid sequential tests.",
    )
    parser.add_argument("--db", help=DB_HELP)
    parser.add_argument("--version", action=VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_init(sub)
    add_run(sub)
    add_streams(sub)
    add_alarms(sub)
    add_fleets(sub)
    add_report(sub)
    add_dead_letters(sub)
    add_db(sub)
    add_serve(sub)
    add_dashboards(sub)
    add_demo(sub)
    add_bench(sub)
    db_everywhere(parser)
    return parser
