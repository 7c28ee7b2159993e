"""Expand a Grafana PostgreSQL panel query the way Grafana does before it reaches the database.

Two stages, as in Grafana:

1. the frontend substitutes template variables (``$stream``, ``${stream}``, ``[[stream]]``) and
   the interval variables ``$__interval`` / ``$__interval_ms``. SQL datasources quote the values
   of a multi-value or include-all variable (``'a','b'``, quotes doubled) and insert a
   single-value variable raw;
2. the backend macro engine (``pkg/tsdb/grafana-postgresql-datasource/macros.go``) rewrites
   ``$__name(args)`` macros: ``$__time``, ``$__timeEpoch``, ``$__timeFilter``, ``$__timeFrom``,
   ``$__timeTo``, ``$__timeGroup``, ``$__timeGroupAlias``, ``$__unixEpochFilter``,
   ``$__unixEpochGroup``, ``$__unixEpochGroupAlias``. Like Grafana, the macro pattern stops at
   the first ``)``, and an unknown macro is an error (so a dashboard cannot use a macro that
   this expander, and therefore the SQL test, does not cover).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

_MACRO = re.compile(r"\$([_a-zA-Z0-9]+)\(([^)]*)\)")
_INTERVAL = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


class MacroError(ValueError):
    """A query uses a macro or variable that Grafana would reject or that has no value."""


@dataclass(frozen=True)
class Variable:
    """A template variable's current value(s) and whether Grafana quotes them."""

    values: tuple[str, ...]
    multi: bool = False

    def render(self) -> str:
        if not self.multi:
            return self.values[0]
        return ",".join("'" + v.replace("'", "''") + "'" for v in self.values)


@dataclass(frozen=True)
class QueryContext:
    """Time range, interval and variable values of one panel refresh."""

    time_from: datetime
    time_to: datetime
    interval: str = "10s"
    variables: Mapping[str, Variable] = field(default_factory=dict)


def parse_interval(text: str) -> float:
    """Seconds of a Grafana interval such as ``10s``, ``500ms``, ``1h`` (gtime.ParseInterval)."""
    match = _INTERVAL.match(text.strip().strip("'"))
    if not match:
        raise MacroError(f"cannot parse interval {text!r}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def expand(sql: str, ctx: QueryContext) -> str:
    """``sql`` with variables and macros expanded for ``ctx``."""
    return _expand_macros(_expand_variables(sql, ctx), ctx)


def _expand_variables(sql: str, ctx: QueryContext) -> str:
    seconds = parse_interval(ctx.interval)
    sql = sql.replace("$__interval_ms", str(round(seconds * 1000)))
    sql = sql.replace("${__interval}", ctx.interval).replace("$__interval", ctx.interval)

    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name.startswith("__"):
            return match.group(0)  # a macro or a built-in, handled by the macro stage
        if name not in ctx.variables:
            raise MacroError(f"template variable ${name} has no value")
        return ctx.variables[name].render()

    return re.sub(r"\$\{(\w+)\}|\[\[(\w+)\]\]|\$(\w+)(?!\w|\()", variable, sql)


def _expand_macros(sql: str, ctx: QueryContext) -> str:
    def macro(match: re.Match[str]) -> str:
        name, raw_args = match.group(1), match.group(2)
        args = [a.strip() for a in raw_args.split(",")]
        # Grafana: "$__timeGroup(...)," followed by a comma keeps the pre-5.3 alias behaviour.
        if name == "__timeGroup" and sql[match.end() : match.end() + 1] == ",":
            name = "__timeGroupAlias"
        return _evaluate(name, args, ctx)

    return _MACRO.sub(macro, sql)


def _evaluate(name: str, args: Sequence[str], ctx: QueryContext) -> str:
    column = args[0] if args and args[0] else None
    frm, to = _rfc3339(ctx.time_from), _rfc3339(ctx.time_to)
    if name in {"__time", "__timeEpoch", "__timeFilter", "__unixEpochFilter"} and column is None:
        raise MacroError(f"missing time column argument for macro {name}")
    if name == "__time":
        return f'{column} AS "time"'
    if name == "__timeEpoch":
        return f'extract(epoch from {column}) as "time"'
    if name == "__timeFilter":
        return f"{column} BETWEEN '{frm}' AND '{to}'"
    if name == "__timeFrom":
        return f"'{frm}'"
    if name == "__timeTo":
        return f"'{to}'"
    if name == "__unixEpochFilter":
        lo, hi = int(ctx.time_from.timestamp()), int(ctx.time_to.timestamp())
        return f"{column} >= {lo} AND {column} <= {hi}"
    if name in {"__timeGroup", "__timeGroupAlias", "__unixEpochGroup", "__unixEpochGroupAlias"}:
        return _group(name, args)
    raise MacroError(f"unknown macro {name!r}")


def _group(name: str, args: Sequence[str]) -> str:
    if len(args) < 2:
        raise MacroError(f"macro {name} needs a time column and an interval")
    step = _go_float(parse_interval(args[1]))
    if name.startswith("__timeGroup"):
        expr = f"floor(extract(epoch from {args[0]})/{step})*{step}"
    else:
        expr = f"floor(({args[0]})/{step})*{step}"
    return expr + ' AS "time"' if name.endswith("Alias") else expr


def _go_float(x: float) -> str:
    """Go's ``%v`` of a float64 for the values that occur here (60 -> ``60``, 0.5 -> ``0.5``)."""
    if math.isfinite(x) and x == int(x) and abs(x) < 1e21:
        return str(int(x))
    return repr(x)


def _rfc3339(ts: datetime) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: trailing zeros of the fraction dropped, ``Z`` suffix."""
    ts = ts.astimezone(UTC)
    text = ts.strftime("%Y-%m-%dT%H:%M:%S")
    if ts.microsecond:
        text += ("." + f"{ts.microsecond:06d}").rstrip("0")
    return text + "Z"
