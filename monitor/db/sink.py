"""The database behind the worker's :class:`~monitor.engine.sink.Sink`: each batch with its
detector checkpoints and source offsets in one transaction, writer fencing
(:mod:`monitor.db.fencing`), and the database's errors told to the worker as
:class:`~monitor.engine.sink.Fault` kinds (:func:`monitor.db.errors.sink_fault`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from monitor.db.errors import sink_fault
from monitor.engine.sink import Batch, Fault, TopicPartition
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.monitor import FeatureOrderError
from monitor.streams.records import Alarm
from monitor.streams.setup import stored_calibration

if TYPE_CHECKING:
    from monitor.alerts import AlertRouting


class DatabaseSink:
    """Persists each batch with its detector checkpoints and source offsets in one transaction."""

    def __init__(self, url: str, migrate: bool = True, routing: AlertRouting | None = None) -> None:
        from monitor.db.engine import make_engine, session_factory
        from monitor.db.migrate import upgrade

        if migrate:
            upgrade(url)
        self.engine = make_engine(url)
        self.sessions = session_factory(self.engine)
        #: Alert routing: each batch's alarms are queued in ``alert_outbox`` with the batch.
        self.routing = routing

    @property
    def route(self) -> Callable[[Sequence[Alarm]], list[dict[str, Any]]] | None:
        """The ``alert_outbox`` rows of alarms under :attr:`routing` (None: no receiver)."""
        if self.routing is None:
            return None
        from monitor.alerts import outbox_rows

        return partial(outbox_rows, routing=self.routing)

    def load_offsets(
        self, keys: set[TopicPartition], source: Callable[[str], str]
    ) -> dict[TopicPartition, int]:
        from monitor.db.store import load_offsets

        out: dict[TopicPartition, int] = {}
        with self.sessions() as session:
            for topic in {t for t, _ in keys}:
                stored = load_offsets(session, source(topic))
                out.update({(topic, p): o for p, o in stored.items() if (topic, p) in keys})
        return out

    def load_state(self, stream: str) -> dict[str, Any] | None:
        from monitor.db.store import load_state

        with self.sessions() as session:
            checkpoint = load_state(session, stream)
        return None if checkpoint is None else checkpoint.state

    def persist(self, batch: Batch) -> None:
        """Store ``batch`` atomically, with the alert rows of its alarms under :attr:`routing`
        (:func:`monitor.db.store.persist_batch`)."""
        from monitor.db.store import persist_batch

        with self.sessions() as session:
            persist_batch(session, batch, route=self.route)

    def claim(self, source: str, group: str, partitions: set[int]) -> tuple[str, dict[int, int]]:
        """Take ``partitions`` of ``source`` for ``group``: the offset key to store them under and
        each partition's new fencing epoch (:func:`monitor.db.fencing.claim_partitions`)."""
        from monitor.db.fencing import claim_partitions
        from monitor.db.models import source_key

        with self.sessions() as session:
            return claim_partitions(session, source_key(source), group, partitions)

    def fault(self, exc: BaseException) -> Fault | None:
        """What the error ``exc`` means to the worker (:func:`monitor.db.errors.sink_fault`)."""
        return sink_fault(exc)

    def register(self, config: StreamConfig, calibration: Calibration) -> tuple[int, bool]:
        """Register the stream unless it is registered with this very configuration and
        calibration; ``(version, created)``.

        Raises ``StreamChangedError`` (one line pointing to ``monitor streams update``) when the
        name is registered with another configuration: the stored one is never replaced here.
        """
        from monitor.db.queries import register_stream

        with self.sessions() as session:
            row, created = register_stream(session, config, calibration.to_rows())
            return row.version, created

    def update(self, config: StreamConfig, calibration: Calibration) -> tuple[int, bool]:
        """Store a changed configuration of a registered stream as its next version;
        ``(version, changed)`` (an unchanged one stores nothing)."""
        from monitor.db.queries import new_stream_version

        with self.sessions() as session:
            row, changed = new_stream_version(session, config, calibration.to_rows())
            return row.version, changed

    def registered(
        self,
    ) -> tuple[list[tuple[StreamConfig, Calibration]], dict[str, tuple[int, str]]]:
        """The registered streams a worker can run, with their calibrations, and those it
        cannot (name → configuration version, why: :func:`stored_calibration`)."""
        from monitor.db.store import load_streams

        with self.sessions() as session:
            stored = load_streams(session)
        runnable, stopped = [], {}
        for s in stored:
            config = StreamConfig.model_validate(s.config)
            try:
                runnable.append((config, stored_calibration(s)))
            except FeatureOrderError as exc:
                stopped[config.name] = (s.version, str(exc))
        return runnable, stopped

    def stream_versions(self) -> dict[str, int]:
        """Every registered stream's configuration version, by name."""
        from monitor.db.store import stream_versions

        with self.sessions() as session:
            return stream_versions(session)

    def registered_stream(self, name: str) -> tuple[StreamConfig, Calibration, int] | None:
        """One registered stream's configuration, calibration and version, or None."""
        from monitor.db.store import load_stream

        with self.sessions() as session:
            found = load_stream(session, name)
        if found is None:
            return None
        return StreamConfig.model_validate(found.config), stored_calibration(found), found.version

    def close(self) -> None:
        self.engine.dispose()

