"""The CLI commands' logic: build streams, sources and sinks from settings and run them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from monitor.cli.common import UserError
from monitor.db.sink import DatabaseSink
from monitor.engine.pipeline import BatchOutput, Pipeline
from monitor.engine.worker import (
    NullSink,
    RetryPolicy,
    RunSummary,
    Sink,
    StopFlag,
    Worker,
)
from monitor.settings import Settings
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.monitor import StreamMonitor
from monitor.streams.records import Alarm
from monitor.streams.setup import (
    RunError,
    build_monitors,
    load_calibration,
    read_configs,
)

if TYPE_CHECKING:
    from monitor.db.models import AlarmRow

log = logging.getLogger(__name__)

def open_sink(settings: Settings, store: bool) -> Sink:
    return DatabaseSink(settings.database_url, settings.auto_migrate) if store else NullSink()


def run_source(
    source_url: str,
    configs: list[str],
    group: str,
    settings: Settings,
    store: bool = True,
    batch_size: int = 500,
    on_alarm: Callable[[Alarm], None] | None = None,
    stop: StopFlag | None = None,
    on_batch: Callable[[BatchOutput], None] | None = None,
    source_options: Mapping[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    checkpoint_every: int = 1,
    metrics_port: int | None = None,
    health_bound_s: float = 30.0,
    metrics_host: str = "0.0.0.0",
) -> RunSummary:
    """``monitor run``: process a source to its end (file) or until stopped (Kafka).

    ``source_options`` are keyword arguments of the source class (e.g. Kafka consumer options
    that a URL cannot carry); ``retry`` bounds how long an unavailable database is waited for;
    ``checkpoint_every`` stores detector states and offsets every this many batches (the
    batches in between store their results only; see ``Worker``).
    A source that never ends keeps only the last 10 000 alarms and OOD flags in the summary.

    ``metrics_port`` (None: off; 0: any free port) serves the worker's ``/healthz`` and
    ``/metrics`` on ``metrics_host`` while it runs (:mod:`monitor.ops.health`; ``health_bound_s``
    bounds how long the loop, the database or the broker may fail before ``/healthz`` is 503).
    """
    from connectors import open_source

    sink = open_sink(settings, store)
    monitors, stopped = monitors_for_run(configs, sink)
    kind = source_url.split(":", 1)[0]
    source = open_source(source_url, group=group, kafka_client=settings.kafka_client,
                         **(source_options or {}))
    pipeline = Pipeline(monitors, source=source.name, max_event_bytes=settings.max_event_bytes,
                        stopped=stopped)
    hooks = _alerts(settings, sink)
    watched = _watch(metrics_port, metrics_host, health_bound_s, store, pipeline, source, sink)
    worker = Worker(
        source if watched is None else watched.source,
        pipeline,
        sink if watched is None else watched.sink,
        source_kind=kind,
        batch_size=batch_size,
        on_alarm=_fan_out(on_alarm, None if hooks is None else hooks.notify),
        on_batch=on_batch if watched is None else _batch_fan_out(watched.batch_done, on_batch),
        retry=retry,
        summary_limit=None if kind == "file" else 10_000,
        checkpoint_every=checkpoint_every,
        housekeeping=_retention(settings, sink),
    )
    stop = stop if stop is not None else StopFlag()  # an unset flag is falsy
    ended = "the source ended"
    try:
        with stop.on_signals():
            return worker.run(stop)
    except BaseException as exc:
        ended = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        raise
    finally:
        if watched is not None:
            watched.health.end(ended)
        source.close()
        if hooks is not None:
            hooks.close()
        if watched is not None:
            watched.server.close()


@dataclass
class _Watched:
    """The health and metrics of one run: wrapped source and sink, and the HTTP server."""

    health: Any
    source: Any
    sink: Any
    server: Any

    def batch_done(self, out: BatchOutput) -> None:
        self.health.batch_done(out)


def _watch(
    port: int | None,
    host: str,
    bound_s: float,
    store: bool,
    pipeline: Pipeline,
    source: Any,
    sink: Sink,
) -> _Watched | None:
    """Wrap the run's source and sink to record its health, and serve it (None: no port)."""
    if port is None:
        return None
    from monitor.ops.health import (
        HealthServer,
        StreamEvents,
        WatchedSink,
        WatchedSource,
        WorkerHealth,
    )

    health = WorkerHealth(bound_s=bound_s, uses_database=store)
    health.registry.register(StreamEvents(lambda: pipeline.streams))
    try:
        server = HealthServer(health, port, host).start()
    except OSError as exc:
        source.close()
        raise RunError(f"cannot serve worker metrics on {host}:{port}: {exc}") from None
    return _Watched(health, WatchedSource(source, health), WatchedSink(sink, health), server)


def _batch_fan_out(
    *callbacks: Callable[[BatchOutput], None] | None,
) -> Callable[[BatchOutput], None]:
    active = [c for c in callbacks if c is not None]

    def call(out: BatchOutput) -> None:
        for callback in active:
            callback(out)

    return call


@dataclass
class _AlertHooks:
    """What delivers a run's alarms: ``notify`` is called with each durable alarm."""

    notify: Callable[[Alarm], None]
    close: Callable[[], None]


def _alerts(settings: Settings, sink: Sink) -> _AlertHooks | None:
    """With a database, the sink queues each batch's routed alarms in ``alert_outbox`` and a
    delivery thread sends them (at-least-once); without one (``--no-store``), the in-memory
    dispatcher of ``MONITOR_WEBHOOK_URLS`` (at-most-once). None: no receiver."""
    from monitor.alerts import AlertDelivery, AlertRoutingError, routing_from_settings
    from monitor.alerts.delivery import dispatcher_from_settings

    try:
        routing = routing_from_settings(settings)
    except AlertRoutingError as exc:
        raise RunError(str(exc)) from None
    if routing is None:
        return None
    if not isinstance(sink, DatabaseSink):
        if settings.alerts_file:
            log.warning("--no-store: the alert routing file needs the database (its outbox); "
                        "only MONITOR_WEBHOOK_URLS receive alarms, from memory")
        hooks = dispatcher_from_settings(settings, lambda attempt: None)
        return None if hooks is None else _AlertHooks(hooks.submit, hooks.close)
    sink.routing = routing
    delivery = AlertDelivery(sink.sessions, settings.webhook_secret, routing.delivery).start()
    return _AlertHooks(delivery.wake, delivery.close)


def _fan_out(*callbacks: Callable[[Alarm], None] | None) -> Callable[[Alarm], None] | None:
    """One alarm callback calling each given one (delivery never blocks detection)."""
    active = [c for c in callbacks if c is not None]
    if not active:
        return None

    def call(alarm: Alarm) -> None:
        for callback in active:
            callback(alarm)

    return call


def monitors_for_run(
    configs: list[str], sink: Sink
) -> tuple[dict[str, StreamMonitor], dict[str, tuple[int, str]]]:
    """The monitors of ``monitor run``: the ``configs`` streams (registered, or found registered
    as they are, on a database), else every registered stream as stored; and the registered
    streams it cannot run (name → version, why: ``Pipeline(stopped=...)``)."""
    if configs:
        parsed = read_configs(configs)
        monitors = build_monitors(parsed)
        if isinstance(sink, DatabaseSink):
            _register_for_run(sink, parsed, monitors)
        return monitors, {}
    if not isinstance(sink, DatabaseSink):
        raise RunError("--no-store needs --config: there is no registry to read streams from")
    registered, stopped = sink.registered()
    if not registered and not stopped:
        raise RunError("no stream is registered: use `monitor streams create CONFIG` or --config")
    return registered_monitors(sink, registered), stopped


def _register_for_run(
    sink: DatabaseSink, parsed: list[StreamConfig], monitors: dict[str, StreamMonitor]
) -> None:
    """Register the ``--config`` streams (or find them registered as they are) and run each at
    its stored version, its features in the stored order (the file may list the same features
    in another order: the checkpoint was taken with the stored one)."""
    from monitor.db.errors import StreamChangedError

    for config in parsed:
        monitor = monitors[config.name]
        try:
            version, _ = sink.register(config, monitor.calibration)
        except StreamChangedError as exc:
            raise RunError(str(exc)) from None
        monitor.config_version = version
        stored = sink.registered_stream(config.name)
        if stored is not None and stored[1].feature_names != monitor.feature_names:
            monitors[config.name] = StreamMonitor(config, stored[1], version)


def registered_monitors(
    sink: DatabaseSink, registered: Sequence[tuple[StreamConfig, Calibration]]
) -> dict[str, StreamMonitor]:
    """Monitors of registered streams, each at its stored configuration version (so that a
    checkpoint of that version restores as is)."""
    monitors = build_monitors([c for c, _ in registered], {c.name: cal for c, cal in registered})
    for name, version in sink.stream_versions().items():
        if name in monitors:
            monitors[name].config_version = version
    return monitors


def register_stream(path: str, settings: Settings) -> str:
    """``monitor streams create``: the stream's name (see :func:`register_stream_version`)."""
    return register_stream_version(path, settings).name


@dataclass(frozen=True)
class Registration:
    """What registering or updating a stream did."""

    name: str
    version: int
    #: ``"created"``, ``"unchanged"`` (registered already with this configuration) or
    #: ``"updated"`` (a new version was stored).
    outcome: str


def register_stream_version(path: str, settings: Settings, update: bool = False) -> Registration:
    """Register the stream of a configuration file (``update``: store it as a new version of a
    registered one). Registering never changes a registered stream: another configuration under
    its name raises ``StreamChangedError``; updating a stream that is not registered raises
    ``StreamNotFoundError``."""
    config = read_configs([path])[0]
    calibration = load_calibration(config)
    StreamMonitor(config, calibration)  # validates that the stream can be monitored
    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    try:
        if update:
            version, changed = sink.update(config, calibration)
            return Registration(config.name, version, "updated" if changed else "unchanged")
        version, created = sink.register(config, calibration)
        return Registration(config.name, version, "created" if created else "unchanged")
    finally:
        sink.close()


def list_streams(settings: Settings) -> list[dict[str, Any]]:
    from monitor.db.store import load_streams

    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    try:
        with sink.sessions() as session:
            stored = load_streams(session)
    finally:
        sink.close()
    listed = []
    for s in stored:
        config = StreamConfig.model_validate(s.config)
        listed.append({
            "name": config.name,
            "task": config.task,
            "version": s.version,
            "calibration_events": len(s.calibration),
            "config": config.model_dump(mode="json", exclude={"calibration"}),
        })
    return listed


@dataclass(frozen=True)
class Rebound:
    """What ``monitor streams rebind`` did: the old and new writers' descriptions, and, for a
    move to another group of the same Kafka source, the partitions the new group has read past
    the old one (partition → (old group's offset, new group's)): the stream's records there are
    processed by neither group."""

    old: str | None
    new: str
    ahead: dict[int, tuple[int, int]]


def rebind_stream(
    settings: Settings,
    stream: str,
    *,
    group: str | None = None,
    source: str | None = None,
    http: bool = False,
    file: str | None = None,
) -> Rebound:
    """``monitor streams rebind``: bind ``stream`` to a consumer group (of ``source``, or of the
    source it is bound to), to a file source or to HTTP ingest (see :class:`Rebound`)."""
    from pathlib import Path

    from monitor.db.fencing import HTTP, Writer, get_binding, positions_ahead
    from monitor.db.fencing import rebind_stream as rebind
    from monitor.db.models import source_key

    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    try:
        with sink.sessions() as session:
            current = get_binding(session, stream)
            session.rollback()
        if http:
            writer = HTTP
        elif file is not None:
            writer = Writer(source_key(f"file:{Path(file).resolve()}"))
        else:
            key = source or (current.source if current is not None else None)
            if key is None or key == "http":
                raise ValueError(f"stream {stream!r} is not bound to a Kafka source: give "
                                 "--source kafka:TOPIC with --group")
            writer = Writer(source_key(key), group or "")
        with sink.sessions() as session:
            old = rebind(session, stream, writer)
            ahead: dict[int, tuple[int, int]] = {}
            if old is not None and old.source == writer.source and old.group != writer.group:
                ahead = positions_ahead(session, writer.source, old.group, writer.group)
        return Rebound(None if old is None else old.describe(), writer.describe(), ahead)
    finally:
        sink.close()


def _retention(settings: Settings, sink: Any) -> tuple[float, Callable[[], Any]] | None:
    """The worker's background retention pass (monitor.db.retention), when it stores results."""
    if not isinstance(sink, DatabaseSink) or settings.retention_interval <= 0:
        return None
    from monitor.db.retention import prune

    def task() -> None:
        report = prune(sink.sessions, max_seconds=settings.retention_max_seconds)
        if report.total:
            log.info("retention: pruned %s", report.deleted)

    return settings.retention_interval, task


def list_alarms(
    settings: Settings, stream: str | None, kind: str | None, limit: int
) -> list[dict[str, Any]]:
    from monitor.db.queries import list_alarms as query_alarms

    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    with sink.sessions() as session:
        page = query_alarms(session, stream=stream, kind=kind, limit=limit)
        return [_alarm_json(row) for row in page.items]


def _alarm_json(row: AlarmRow) -> dict[str, Any]:
    return row.to_record().to_json()


def resolve_alarm(session: Any, text: str) -> str:
    """The whole id of the alarm ``text`` names (an id or a prefix of one); a
    :class:`UserError` (exit code 2) when it names none or several, listing those."""
    from monitor.db.errors import AlarmNotFoundError
    from monitor.db.queries import resolve_alarm_id
    from monitor.streams.alarm_ids import AmbiguousAlarmIdError

    try:
        return resolve_alarm_id(session, text)
    except (AlarmNotFoundError, AmbiguousAlarmIdError) as exc:
        raise UserError(f"{exc} (see `monitor alarms list`)") from None


def show_alarm(settings: Settings, text: str) -> dict[str, Any]:
    """The alarm ``text`` names (an id or a prefix of one) as ``GET /alarms/{id}`` shows it: its
    latest version, its acknowledgement and every revision."""
    from monitor.db.queries import alarm_revisions_query, get_alarm
    from monitor.streams.records import iso

    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    try:
        with sink.sessions() as session:
            row = get_alarm(session, resolve_alarm(session, text))
            assert row is not None  # just resolved, in the same transaction
            revisions = [
                {"revision": r.revision, "kind": r.kind, "evidence": r.evidence,
                 "revised_at": None if r.revised_at is None else iso(r.revised_at)}
                for r in session.scalars(alarm_revisions_query(row.id))
            ]
            return _alarm_json(row) | _acknowledgement(row) | {"revisions": revisions}
    finally:
        sink.close()


def acknowledge(settings: Settings, text: str, by: str) -> dict[str, Any]:
    """Acknowledge the alarm ``text`` names (the first acknowledgement is kept); the alarm's
    id and acknowledgement."""
    from monitor.db.queries import acknowledge_alarm

    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    try:
        with sink.sessions() as session:
            row = acknowledge_alarm(session, resolve_alarm(session, text), by=by)
            return {"id": row.id} | _acknowledgement(row)
    finally:
        sink.close()


def _acknowledgement(row: AlarmRow) -> dict[str, Any]:
    from monitor.streams.records import iso

    at = row.acknowledged_at
    return {"acknowledged_at": None if at is None else iso(at),
            "acknowledged_by": row.acknowledged_by}


def list_fleets(settings: Settings) -> list[dict[str, Any]]:
    """Every stored fleet, by name, with the fields of ``GET /fleets``."""
    from monitor.db.queries import fleets_query
    from monitor.streams.records import iso

    sink = DatabaseSink(settings.database_url, settings.auto_migrate)
    try:
        with sink.sessions() as session:
            return [
                {"name": f.name, "rule": f.rule, "alpha": f.alpha, "members": list(f.members),
                 "evaluated_through": None if f.evaluated_through is None
                 else iso(f.evaluated_through),
                 "created_at": iso(f.created_at)}
                for f in session.scalars(fleets_query())
            ]
    finally:
        sink.close()
