"""What the ``monitor`` commands share: the user error, argument types, the ``--db``,
``--alerts`` and ``--version`` options."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NoReturn

from monitor.errors import MonitorError
from monitor.settings import Settings

Handler = Callable[[argparse.Namespace, Settings], int]


class UserError(MonitorError):
    """A problem the user can fix (bad file, bad configuration); printed without a traceback."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (``main`` prints it, exit code 2)."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` with its lines joined (pydantic's are several)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return "; ".join(lines) or type(exc).__name__


def first_line(exc: BaseException | None) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65_535:
        raise argparse.ArgumentTypeError(f"a port is between 0 and 65535, got {value}")
    return value


def installed_version() -> str:
    """The version of the installed ``monitor``: its ``_version`` module when the build wrote
    one, else the distribution's metadata (``conformal-monitor``, formerly ``monitor``), else
    the package's ``__version__``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        from monitor._version import __version__  # type: ignore[import-not-found,unused-ignore]

        return str(__version__)
    except ImportError:
        pass
    for distribution in ("conformal-monitor", "monitor"):
        try:
            return version(distribution)
        except PackageNotFoundError:
            continue
    import monitor

    return str(getattr(monitor, "__version__", "unknown"))


class VersionAction(argparse.Action):
    """``--version``: print ``monitor VERSION`` and exit 0 (the version is read only then)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog} {installed_version()}")
        parser.exit()


DB_HELP = "database URL (default: MONITOR_DATABASE_URL or sqlite:///./monitor.db)"


def db_everywhere(parser: argparse.ArgumentParser) -> None:
    """Accept ``--db`` after any subcommand too (``monitor alarms list --db URL``).

    Each subcommand's copy has no default (``SUPPRESS``), so it sets ``args.db`` only when given
    and never overwrites a ``--db`` given before the subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in dict.fromkeys(action.choices.values()):
                if "--db" not in subparser._option_string_actions:
                    subparser.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)
                db_everywhere(subparser)


def iso_time(text: str) -> datetime:
    """An ISO 8601 time (``Z`` accepted); one without a zone is UTC."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 time (e.g. 2026-12-01T09:00:00Z)"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def alerts_argument(p: Any) -> None:
    p.add_argument(
        "--alerts",
        metavar="FILE",
        help="alert routing file, YAML or JSON (default: MONITOR_ALERTS_FILE; "
        "docs/operations.md, \"Alert routing\")",
    )


def with_alerts(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` with ``--alerts``, checked now: a bad routing file is one line, exit 2."""
    from monitor.alerts import AlertRoutingError, load_alert_routing
    from monitor.alerts.routing import webhook_urls

    if getattr(args, "alerts", None):
        settings = settings.model_copy(update={"alerts_file": args.alerts})
    try:
        load_alert_routing(settings.alerts_file, webhook_urls(settings.webhook_urls))
    except AlertRoutingError as exc:
        raise UserError(str(exc)) from None
    return settings


def safe_url(url: str) -> str:
    """The database URL with any password masked, for printing."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is reported by the command itself
        return "<database>"


# -- commands ----------------------------------------------------------------------------------
