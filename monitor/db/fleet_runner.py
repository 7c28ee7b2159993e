"""Run a fleet's cross-stream rule on what the workers stored: the decision at the database.

The streams of a fleet may live on different workers and partitions. Each worker stores its
streams' detector traces (``trace_points``: event time ``ts``, ``log_statistic`` = log R_t of
the Shiryaev–Roberts e-detector). :func:`evaluate_fleet` reads the members' trace points with
event time in (``evaluated_through``, ``through``], steps the fleet's
:class:`~monitor.core.fleet.FleetDecider` once per distinct event time (each member at its latest
value
at or before that time), and stores an alarm for every member the rule admits, with ``fleet``,
``fleet_rule`` and ``fleet_level`` set. The decider's state and ``evaluated_through`` are saved
in the same transaction, so a crash between two calls neither loses nor repeats an alarm.

Latency: a member's value reaches the decider when its trace point is stored, i.e. every
``trace_every`` events of that stream after its worker's batch commits; the rule is evaluated
at those event times only (a subset of times keeps the guarantee, which holds at every stopping
time). Fleet alarms carry kind ``undiagnosed``: the diagnosis needs the stream's evidence,
which stays with its worker.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from monitor.core.fleet import FleetDecider, FleetRule
from monitor.db.errors import FleetExistsError, FleetNotFoundError
from monitor.db.models import AlarmRow, AlertOutboxRow, FleetRow, TracePointRow
from monitor.streams.config import NAME_PATTERN, ConfigError
from monitor.streams.records import alarm_id, finite

if TYPE_CHECKING:
    from monitor.alerts import AlertRouting

__all__ = [
    "FLEET_ALARM_KIND",
    "FleetConfig",
    "FleetNotFoundError",
    "create_fleet",
    "evaluate_fleet",
    "load_fleet_config",
]

FLEET_ALARM_KIND = "undiagnosed"
_DETECTORS = ("covariate", "conditional")


class FleetConfig(BaseModel):
    """A fleet file (YAML or JSON): ``name``, ``rule``, ``alpha`` and ``members``
    (``stream/detector``), as ``monitor fleets create FILE`` reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    rule: FleetRule = "e_d_bh"
    alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 1e-4
    members: Annotated[list[str], Field(min_length=1)]


def load_fleet_config(path: str | Path) -> FleetConfig:
    """Read and check a fleet file; :class:`~monitor.streams.config.ConfigError` says what is
    wrong."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML too
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read fleet file {path}: {exc}") from exc
    try:
        config = FleetConfig.model_validate(data)
        for member in config.members:
            _split(member)
    except ValueError as exc:
        raise ConfigError(f"invalid fleet file {path}: {exc}") from exc
    return config


def _split(member: str) -> tuple[str, str]:
    stream, _, detector = member.rpartition("/")
    if not stream or detector not in _DETECTORS:
        raise ValueError(
            f"fleet member {member!r} must be 'stream/detector' with detector one of {_DETECTORS}"
        )
    return stream, detector


def create_fleet(
    session: Session, name: str, members: Sequence[str], rule: FleetRule, alpha: float
) -> FleetRow:
    """Store a new fleet (the caller commits); members are ``stream/detector`` names."""
    for member in members:
        _split(member)
    decider = FleetDecider(members, rule=rule, alpha=alpha)
    if session.get(FleetRow, name) is not None:
        raise FleetExistsError(f"fleet {name!r} exists already")
    row = FleetRow(
        name=name, rule=rule, alpha=alpha, members=list(members), state=decider.state_dict()
    )
    session.add(row)
    return row


def _member_points(
    session: Session, members: Iterable[str], after: datetime | None, through: datetime,
    chunk: int,
) -> list[TracePointRow]:
    """About ``chunk`` of the members' trace points with after < ts <= through, in event-time
    order, always whole groups of one event time (so one fleet step never straddles two reads)."""
    pairs = [_split(m) for m in members]
    query = select(TracePointRow).where(
        tuple_(TracePointRow.stream, TracePointRow.detector).in_(pairs),
        TracePointRow.ts <= through,
    )
    if after is not None:
        query = query.where(TracePointRow.ts > after)
    order = (TracePointRow.ts, TracePointRow.stream, TracePointRow.detector)
    rows = list(session.scalars(query.order_by(*order).limit(chunk)).all())
    if len(rows) < chunk:
        return rows
    last = rows[-1].ts  # complete the last event time's group
    rest = session.scalars(query.where(TracePointRow.ts == last).order_by(*order)).all()
    return [r for r in rows if r.ts < last] + list(rest)


def _latest_point(session: Session, member: str, at: datetime) -> TracePointRow:
    """The member's latest trace point at or before ``at`` (its value came from an earlier run)."""
    stream, detector = _split(member)
    query = (
        select(TracePointRow)
        .where(TracePointRow.stream == stream, TracePointRow.detector == detector,
               TracePointRow.ts <= at)
        .order_by(TracePointRow.ts.desc(), TracePointRow.event_index.desc())
        .limit(1)
    )
    return session.scalars(query).one()


def _fleet_alarm(row: FleetRow, point: TracePointRow, step: int, log_threshold: float) -> AlarmRow:
    log_stat = float(point.log_statistic if point.log_statistic is not None else -math.inf)
    return AlarmRow(
        id=alarm_id(point.stream, point.detector, point.event_index),
        stream=point.stream,
        detector=point.detector,
        kind=FLEET_ALARM_KIND,
        event_id=f"fleet:{row.name}:{step}",
        event_index=point.event_index,
        ts=point.ts,
        changepoint=None,
        statistic=finite(math.exp(min(log_stat, 700.0))),
        threshold=finite(math.exp(min(log_threshold, 700.0))),
        rule=f"fleet:{row.rule}",
        evidence=_evidence(row, step, log_stat, log_threshold),
        fleet=row.name,
        fleet_rule=row.rule,
        fleet_level=row.alpha,
    )


def _evidence(row: FleetRow, step: int, log_stat: float, log_threshold: float) -> dict[str, Any]:
    # strict JSON: -inf cannot be stored (an admitted value is always finite; the bar may be inf)
    return {
        "fleet": row.name,
        "fleet_rule": row.rule,
        "fleet_level": row.alpha,
        "fleet_size": len(row.members),
        "fleet_step": step,
        "log_statistic": finite(log_stat),
        "log_threshold": finite(log_threshold),
    }


def evaluate_fleet(
    session: Session, name: str, through: datetime, routing: AlertRouting | None = None,
    chunk: int = 50_000,
) -> list[AlarmRow]:
    """Decide every event time of the members' traces up to ``through``; store and return the
    new fleet alarms (the caller commits), with their ``alert_outbox`` rows when ``routing`` is
    given (delivered by any process that runs the delivery loop). Points are read ``chunk`` at a
    time, so a long backlog needs bounded memory."""
    row = session.get(FleetRow, name, with_for_update=True)
    if row is None:
        raise FleetNotFoundError(f"no fleet named {name!r}")
    decider = FleetDecider.from_state(row.state)
    latest: dict[str, TracePointRow] = {}
    alarms: list[AlarmRow] = []
    after = row.evaluated_through
    while True:
        points = _member_points(session, row.members, after, through, chunk)
        for ts, group in itertools.groupby(points, key=lambda p: p.ts):
            for point in group:  # one fleet step per distinct event time
                member = f"{point.stream}/{point.detector}"
                latest[member] = point
                decider.update(member, _log_value(point))
            alarms += _step(session, row, decider, latest, ts)
        if points:
            after = points[-1].ts
        if len(points) < chunk:
            break
    if routing is not None and alarms:
        from monitor.alerts import outbox_rows

        session.flush()  # the outbox rows refer to the alarms
        records = [alarm.to_record() for alarm in alarms]
        session.add_all(AlertOutboxRow(**r) for r in outbox_rows(records, routing))
    row.state = decider.state_dict()
    row.evaluated_through = after
    return alarms


def _log_value(point: TracePointRow) -> float:
    return point.log_statistic if point.log_statistic is not None else -math.inf


def _step(
    session: Session, row: FleetRow, decider: FleetDecider, latest: dict[str, TracePointRow],
    at: datetime,
) -> list[AlarmRow]:
    decision = decider.decide()
    for member in decider.in_alarm:
        if member not in decision.rejected:  # left the rejection set: may alarm again later
            decider.release(member)
    new = []
    for member in decision.admitted:
        point = latest.get(member) or _latest_point(session, member, at)
        alarm = _fleet_alarm(row, point, decision.step, decision.log_threshold)
        if session.get(AlarmRow, alarm.id) is None:  # the stream's own alarm at this event wins
            session.add(alarm)
            new.append(alarm)
    return new
