"""SQLAlchemy models of the service's tables (created by the Alembic migrations only).

Results tables (alarms, trace points, OOD windows, checkpoints) are keyed by the stream *name*
without a foreign key to ``streams``: ``monitor run --config`` monitors a stream that was never
registered, and deleting a stream's configuration keeps its history. Calibration events belong to
a registered stream and go with it (``ON DELETE CASCADE``).

Every table in one module (~600 lines), on purpose: one declarative ``Base.metadata`` that the
migrations, ``tests/db/test_db_migrations.py``'s schema comparison and Grafana's read-only role
all read, and the tables' keys and indexes side by side.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from monitor.db.types import JSONType, UTCDateTime, id_type
from monitor.streams.records import Alarm, OODWindow, PerformanceWindow, TracePoint

__all__ = [
    "NAMING_CONVENTION",
    "AlarmRevisionRow",
    "AlarmRow",
    "AlertOutboxRow",
    "Base",
    "CalibrationEventRow",
    "CheckpointChunkRow",
    "CheckpointRow",
    "DeadLetterRow",
    "FleetRow",
    "IngestRequestRow",
    "IngestedEventRow",
    "OODFlagRow",
    "OODWindowRow",
    "PerformanceWindowRow",
    "SourceOffsetRow",
    "StreamRow",
    "StreamWriterRow",
    "TracePointRow",
    "WebhookDeliveryRow",
    "WriterFenceRow",
    "bounded_key",
    "event_key",
    "source_key",
]

#: Deterministic constraint names, so migrations can refer to (and drop) them on every dialect.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

NAME = String(128)  # stream names: config.NAME_PATTERN allows up to 128 characters
SHORT = String(64)  # enumerations: detector, kind, rule, task
LABEL = String(255)  # sources, user names, keys of event ids


#: Longest stored key of a source's name (the ``source`` columns).
SOURCE_KEY_LENGTH = 255
#: Longest stored key of an event id (``ood_flags``, ``ingested_events``).
EVENT_KEY_LENGTH = 255


def bounded_key(text: str, length: int) -> str:
    """A key of at most ``length`` characters that identifies ``text`` of any length.

    ``text`` itself when it fits (so rows stored before keys existed keep matching); else a
    readable prefix of it, ``~sha256:`` and the SHA-256 of the whole text.

    Examples
    --------
    >>> bounded_key("file:/data/events.jsonl", 255)
    'file:/data/events.jsonl'
    >>> key = bounded_key("file:/" + "d" * 300, 255)
    >>> len(key), key[:8], key[183:191]
    (255, 'file:/dd', '~sha256:')
    """
    if len(text) <= length:
        return text
    digest = "~sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    if length < len(digest):
        raise ValueError(f"a key needs at least {len(digest)} characters, got {length}")
    return text[: length - len(digest)] + digest


def source_key(name: str) -> str:
    """The bounded key under which a source's offsets and dead letters are stored
    (:func:`bounded_key`); the whole name is stored beside it (``source_name``)."""
    return bounded_key(name, SOURCE_KEY_LENGTH)


def event_key(event_id: str) -> str:
    """The bounded key under which an event id is stored where it is a key (:func:`bounded_key`:
    the id itself up to 255 characters)."""
    return bounded_key(event_id, EVENT_KEY_LENGTH)


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def _created() -> Mapped[datetime]:
    return mapped_column(UTCDateTime(), default=utcnow, server_default=func.now())


class Base(DeclarativeBase):
    """Declarative base holding the metadata with the naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class StreamRow(Base):
    """A registered stream: its configuration (``StreamConfig.model_dump(mode="json")``) and
    the configuration's version (1 at registration, + 1 at each explicit update that changes the
    configuration or the calibration events)."""

    __tablename__ = "streams"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    task: Mapped[str] = mapped_column(SHORT)
    config: Mapped[dict[str, Any]] = mapped_column(JSONType)
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    #: The features' names in the order the detectors read them (object features; NULL for
    #: list features), set with the calibration events of each configuration version. Never
    #: taken from a stored object's keys: JSONB keeps them in its own order.
    feature_names: Mapped[list[str] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, server_default=func.now()
    )

    calibration_events: Mapped[list[CalibrationEventRow]] = relationship(
        back_populates="stream_row", lazy="raise", passive_deletes=True
    )


class CalibrationEventRow(Base):
    """A labeled calibration event of a stream in wire-format fields; ``idx`` keeps file order."""

    __tablename__ = "calibration_events"

    stream: Mapped[str] = mapped_column(
        NAME, ForeignKey("streams.name", ondelete="CASCADE"), primary_key=True
    )
    idx: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    event_id: Mapped[str | None] = mapped_column(Text)  # the whole id: no key (revision 0018)
    features: Mapped[Any] = mapped_column(JSONType)
    prediction: Mapped[Any] = mapped_column(JSONType)
    label: Mapped[Any | None] = mapped_column(JSONType)
    logits: Mapped[list[float] | None] = mapped_column(JSONType)
    embedding: Mapped[list[float] | None] = mapped_column(JSONType)
    #: The model's predicted scale of its error (``normalized_residual`` streams; else NULL).
    scale: Mapped[float | None] = mapped_column(Double)

    stream_row: Mapped[StreamRow] = relationship(back_populates="calibration_events", lazy="raise")


class AlarmRow(Base):
    """An alarm (docs/api.md) plus its acknowledgement, as of its latest revision (the kind,
    evidence, ``revision`` and ``revised_at`` of the last version; every version is kept in
    ``alarm_revisions``)."""

    __tablename__ = "alarms"
    __table_args__ = (
        UniqueConstraint("stream", "detector", "event_index"),
        Index("ix_alarms_stream_ts_id", "stream", "ts", "id"),
        Index("ix_alarms_ts_id", "ts", "id"),
        Index("ix_alarms_kind_ts_id", "kind", "ts", "id"),
        Index("ix_alarms_stream_kind_ts_id", "stream", "kind", "ts", "id"),
        Index(
            "ix_alarms_stream_detector_ts_id", "stream", "detector", "ts", "id",
            postgresql_include=["acknowledged_at"],
        ),
        Index("ix_alarms_revised_at_id", "revised_at", "id"),
        Index("ix_alarms_fleet_ts_id", "fleet", "ts", "id"),
    )

    id: Mapped[str] = mapped_column(SHORT, primary_key=True)
    stream: Mapped[str] = mapped_column(NAME)
    detector: Mapped[str] = mapped_column(SHORT)
    kind: Mapped[str] = mapped_column(SHORT)
    event_id: Mapped[str] = mapped_column(Text)  # the whole id: no key (revision 0018)
    event_index: Mapped[int] = mapped_column(BigInteger)
    ts: Mapped[datetime] = mapped_column(UTCDateTime())
    changepoint: Mapped[int | None] = mapped_column(BigInteger)
    statistic: Mapped[float] = mapped_column(Double)
    threshold: Mapped[float] = mapped_column(Double)
    rule: Mapped[str] = mapped_column(SHORT)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSONType)
    acknowledged_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    acknowledged_by: Mapped[str | None] = mapped_column(LABEL)
    created_at: Mapped[datetime] = _created()
    revision: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    revised_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    #: The fleet whose cross-stream rule admitted the alarm (NULL: the stream's own alarm rule),
    #: that rule (``monitor.core.fleet.FLEET_RULES``) and its EOP level.
    fleet: Mapped[str | None] = mapped_column(NAME)
    fleet_rule: Mapped[str | None] = mapped_column(SHORT)
    fleet_level: Mapped[float | None] = mapped_column(Double)

    def to_record(self) -> Alarm:
        """The pipeline's :class:`~monitor.streams.records.Alarm` (without the acknowledgement)."""
        return Alarm(
            stream=self.stream,
            detector=self.detector,
            kind=self.kind,
            event_id=self.event_id,
            event_index=self.event_index,
            ts=self.ts,
            changepoint=self.changepoint,
            statistic=self.statistic,
            threshold=self.threshold,
            rule=self.rule,
            evidence=dict(self.evidence),
            id=self.id,
            revision=self.revision,
            revised_at=self.revised_at,
        )


class AlarmRevisionRow(Base):
    """One version of an alarm: revision 1 as raised, then each revision
    (``monitor.streams.records``
    ``Alarm``); the alarm's row holds the latest."""

    __tablename__ = "alarm_revisions"

    alarm_id: Mapped[str] = mapped_column(
        SHORT, ForeignKey("alarms.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(SHORT)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSONType)
    revised_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = _created()


class TracePointRow(Base):
    """A downsampled point of a detector's trace; NaN values are stored as NULL."""

    __tablename__ = "trace_points"
    __table_args__ = (
        Index("ix_trace_points_stream_event_index", "stream", "event_index"),
        Index("ix_trace_points_stream_ts", "stream", "ts"),
    )

    stream: Mapped[str] = mapped_column(NAME, primary_key=True)
    detector: Mapped[str] = mapped_column(SHORT, primary_key=True)
    event_index: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    ts: Mapped[datetime] = mapped_column(UTCDateTime())
    log_martingale: Mapped[float | None] = mapped_column(Double)
    p_value: Mapped[float | None] = mapped_column(Double)
    log_statistic: Mapped[float | None] = mapped_column(Double)
    log_threshold: Mapped[float | None] = mapped_column(Double)
    weights_ess: Mapped[float | None] = mapped_column(Double)
    config_version: Mapped[int | None] = mapped_column(Integer)
    #: Ingest time (when the row was stored); ``ts`` is the prediction's event time.
    created_at: Mapped[datetime] = _created()

    def to_record(self) -> TracePoint:
        """The pipeline's :class:`~monitor.streams.records.TracePoint` (NULL comes back as NaN)."""
        nan = float("nan")
        return TracePoint(
            stream=self.stream,
            detector=self.detector,
            event_index=self.event_index,
            ts=self.ts,
            log_martingale=nan if self.log_martingale is None else self.log_martingale,
            p_value=nan if self.p_value is None else self.p_value,
            log_statistic=nan if self.log_statistic is None else self.log_statistic,
            log_threshold=nan if self.log_threshold is None else self.log_threshold,
            weights_ess=self.weights_ess,
            config_version=self.config_version,
        )


class PerformanceWindowRow(Base):
    """The model's metrics over one window of a stream's labelled events (docs/explain.md)."""

    __tablename__ = "performance_windows"
    __table_args__ = (Index("ix_performance_windows_stream_ts", "stream", "ts"),)

    stream: Mapped[str] = mapped_column(NAME, primary_key=True)
    window_index: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    start_index: Mapped[int] = mapped_column(BigInteger)
    end_index: Mapped[int] = mapped_column(BigInteger)
    ts: Mapped[datetime] = mapped_column(UTCDateTime())
    n: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSONType)

    def to_record(self) -> PerformanceWindow:
        return PerformanceWindow(
            stream=self.stream,
            window_index=self.window_index,
            start_index=self.start_index,
            end_index=self.end_index,
            ts=self.ts,
            n=self.n,
            metrics=dict(self.metrics),
        )


class OODWindowRow(Base):
    """The OOD decision over one window of a stream's events."""

    __tablename__ = "ood_windows"
    __table_args__ = (Index("ix_ood_windows_stream_ts", "stream", "ts"),)

    stream: Mapped[str] = mapped_column(NAME, primary_key=True)
    window_index: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    start_index: Mapped[int] = mapped_column(BigInteger)
    end_index: Mapped[int] = mapped_column(BigInteger)
    ts: Mapped[datetime] = mapped_column(UTCDateTime())
    n: Mapped[int] = mapped_column(Integer)
    n_flagged: Mapped[int] = mapped_column(Integer)
    threshold: Mapped[float | None] = mapped_column(Double)
    rule: Mapped[str] = mapped_column(SHORT)
    alpha: Mapped[float] = mapped_column(Double)
    #: Ingest time (when the row was stored); ``ts`` is the window's last event time.
    created_at: Mapped[datetime] = _created()

    flags: Mapped[list[OODFlagRow]] = relationship(lazy="raise", passive_deletes=True)

    def to_record(self, flagged_ids: tuple[str, ...] = ()) -> OODWindow:
        """The pipeline's :class:`~monitor.streams.records.OODWindow`; pass the flags if you loaded
        them."""
        return OODWindow(
            stream=self.stream,
            window_index=self.window_index,
            start_index=self.start_index,
            end_index=self.end_index,
            ts=self.ts,
            n=self.n,
            n_flagged=self.n_flagged,
            threshold=float("nan") if self.threshold is None else self.threshold,
            rule=self.rule,
            alpha=self.alpha,
            flagged_ids=flagged_ids,
        )


class OODFlagRow(Base):
    """An event that a window's OOD decision rule flagged.

    ``event_id`` is the bounded key of the event's id (:func:`event_key`: the id itself up to
    255 characters); ``full_event_id`` the whole id when the key is not the id, else NULL.
    :attr:`flagged_id` is the id."""

    __tablename__ = "ood_flags"
    __table_args__ = (
        ForeignKeyConstraint(
            ["stream", "window_index"],
            ["ood_windows.stream", "ood_windows.window_index"],
            ondelete="CASCADE",
        ),
    )

    stream: Mapped[str] = mapped_column(NAME, primary_key=True)
    window_index: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    event_id: Mapped[str] = mapped_column(LABEL, primary_key=True)
    full_event_id: Mapped[str | None] = mapped_column(Text)

    @property
    def flagged_id(self) -> str:
        """The flagged event's whole id."""
        return self.event_id if self.full_event_id is None else self.full_event_id


class CheckpointRow(Base):
    """A stream's latest detector state (:mod:`monitor.streams.state` format).

    ``chunks`` names the :class:`CheckpointChunkRow` pieces its ``arrays`` refer to (their keys,
    sorted, separated by spaces), NULL when it refers to none (every checkpoint stored before
    revision 0019)."""

    __tablename__ = "checkpoints"

    stream: Mapped[str] = mapped_column(NAME, primary_key=True)
    version: Mapped[int] = mapped_column(Integer)
    event_index: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[str] = mapped_column(Text)
    arrays: Mapped[bytes | None] = mapped_column(LargeBinary)
    chunks: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, server_default=func.now()
    )


class CheckpointChunkRow(Base):
    """A piece of a stream's checkpoint arrays, stored once by content: ``key`` is the SHA-256
    of ``data`` (hex); kept while the stream's checkpoint names it
    (:mod:`monitor.db.checkpoint_store`)."""

    __tablename__ = "checkpoint_chunks"

    stream: Mapped[str] = mapped_column(NAME, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class SourceOffsetRow(Base):
    """Next offset to read per source partition (last processed + 1); only ever increases.

    ``source`` is the bounded key of the source's name (:func:`source_key`: the name itself up
    to 255 characters); ``source_name`` the whole name (NULL in rows stored before it existed,
    whose key is their name)."""

    __tablename__ = "source_offsets"

    source: Mapped[str] = mapped_column(LABEL, primary_key=True)
    source_name: Mapped[str | None] = mapped_column(Text)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    offset: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, server_default=func.now()
    )


class DeadLetterRow(Base):
    """A record that could not be processed; one row per source location (replays add nothing)."""

    __tablename__ = "dead_letters"
    __table_args__ = (
        UniqueConstraint("source", "partition", "offset"),
        Index("ix_dead_letters_ts", "ts"),
        Index("ix_dead_letters_stream_ts", "stream", "ts"),
    )

    id: Mapped[int] = mapped_column(id_type, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(LABEL)  # source_key(source_name), as in source_offsets
    source_name: Mapped[str | None] = mapped_column(Text)
    partition: Mapped[int] = mapped_column(Integer)
    offset: Mapped[int] = mapped_column(BigInteger)
    reason: Mapped[str] = mapped_column(Text)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    stream: Mapped[str | None] = mapped_column(NAME)
    ts: Mapped[datetime] = mapped_column(UTCDateTime())
    #: Where ``ts`` came from: ``event`` (the record's own ts), ``broker`` or ``ingest``; NULL
    #: on rows stored before revision 0013.
    ts_source: Mapped[str | None] = mapped_column(SHORT)
    created_at: Mapped[datetime] = _created()


class IngestedEventRow(Base):
    """An event ``POST /events`` processed: ``(stream, kind, id)``, kept for the ingest
    de-duplication window so that a retried event is not counted twice (``event_id`` is
    :func:`event_key` of the id: ids of any length)."""

    __tablename__ = "ingested_events"
    __table_args__ = (Index("ix_ingested_events_created_at", "created_at"),)

    stream: Mapped[str] = mapped_column(NAME, primary_key=True)
    kind: Mapped[str] = mapped_column(SHORT, primary_key=True)
    event_id: Mapped[str] = mapped_column(LABEL, primary_key=True)
    created_at: Mapped[datetime] = _created()


class IngestRequestRow(Base):
    """A ``POST /events`` request sent with an ``Idempotency-Key``: the hash of its body and the
    answer it got, committed with its results, so that a retry answers the same."""

    __tablename__ = "ingest_requests"
    __table_args__ = (Index("ix_ingest_requests_created_at", "created_at"),)

    key: Mapped[str] = mapped_column(LABEL, primary_key=True)
    body_sha256: Mapped[str] = mapped_column(SHORT)
    response: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = _created()


class StreamWriterRow(Base):
    """The one source of writes a stream is bound to: the first writer that stored results for
    it (``source``: a source key such as ``kafka:TOPIC`` or ``file:PATH``, or ``http``;
    ``group_id``: the Kafka consumer group, ``""`` for the others).
    Moved only by ``monitor streams rebind``."""

    __tablename__ = "stream_writers"

    stream: Mapped[str] = mapped_column(NAME, primary_key=True)
    source: Mapped[str] = mapped_column(LABEL)
    group_id: Mapped[str] = mapped_column(LABEL, default="", server_default="")
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, server_default=func.now()
    )


class WriterFenceRow(Base):
    """Fencing tokens of the writers of a source.

    ``partition = -1``: the consumer group owning the source's offset key (the first group that
    claimed it); other groups keep their offsets under ``SOURCE#group``. ``partition >= 0``: the
    epoch of the partition's writer under that offset key, bumped at every assignment; a
    transaction carrying an older epoch is refused (a zombie)."""

    __tablename__ = "writer_fences"

    source: Mapped[str] = mapped_column(LABEL, primary_key=True)
    partition: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    group_id: Mapped[str] = mapped_column(LABEL, default="", server_default="")
    epoch: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, server_default=func.now()
    )


class WebhookDeliveryRow(Base):
    """One attempt to deliver an alarm to a webhook URL."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (UniqueConstraint("idempotency_key", "url", "attempt"),)

    id: Mapped[int] = mapped_column(id_type, primary_key=True, autoincrement=True)
    alarm_id: Mapped[str] = mapped_column(
        SHORT, ForeignKey("alarms.id", ondelete="CASCADE"), index=True
    )
    url: Mapped[str] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer)
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    idempotency_key: Mapped[str] = mapped_column(LABEL)
    created_at: Mapped[datetime] = _created()
    #: Name of the alert receiver (monitor.alerts); NULL for attempts recorded before routing.
    receiver: Mapped[str | None] = mapped_column(LABEL)


class AlertOutboxRow(Base):
    """One alarm to deliver to one alert receiver (docs/operations.md "Alert routing").

    Inserted in the transaction that stores the alarm, so an alarm is stored if and only if its
    deliveries are queued; the delivery loop claims due ``pending`` rows, POSTs ``body`` and
    marks them ``delivered``, or schedules a retry, or after ``attempt_limit`` attempts marks
    them ``dead``."""

    __tablename__ = "alert_outbox"
    __table_args__ = (
        UniqueConstraint("idempotency_key", "receiver"),
        Index("ix_alert_outbox_status_next_attempt_at", "status", "next_attempt_at"),
    )

    id: Mapped[int] = mapped_column(id_type, primary_key=True, autoincrement=True)
    alarm_id: Mapped[str] = mapped_column(
        SHORT, ForeignKey("alarms.id", ondelete="CASCADE"), index=True
    )
    receiver: Mapped[str] = mapped_column(LABEL)
    receiver_type: Mapped[str] = mapped_column(SHORT)
    url: Mapped[str] = mapped_column(Text)
    idempotency_key: Mapped[str] = mapped_column(LABEL)
    body: Mapped[str] = mapped_column(Text)
    #: ``pending``, ``delivered`` or ``dead``.
    status: Mapped[str] = mapped_column(SHORT, default="pending", server_default="pending")
    #: Attempts started (a claim counts one, so a crash during a POST is counted too).
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    #: Attempts per delivery; a retry through the API allows this many more.
    max_attempts: Mapped[int] = mapped_column(Integer)
    #: The row is ``dead`` once a failed attempt brings ``attempts`` to this.
    attempt_limit: Mapped[int] = mapped_column(Integer)
    #: When the row is due (a claim pushes it past the claimer's lease).
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, server_default=func.now()
    )
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class FleetRow(Base):
    """A fleet (docs/algorithms.md "Fleets"): members under one cross-stream rule.

    ``members`` are ``stream/detector`` names; ``state`` is the
    :class:`~monitor.core.fleet.FleetDecider` state; ``evaluated_through`` the event time of the
    latest step decided."""

    __tablename__ = "fleets"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    rule: Mapped[str] = mapped_column(SHORT)
    alpha: Mapped[float] = mapped_column(Double)
    members: Mapped[list[str]] = mapped_column(JSONType)
    state: Mapped[dict[str, Any]] = mapped_column(JSONType)
    evaluated_through: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = mapped_column(
        UTCDateTime(), default=utcnow, onupdate=utcnow, server_default=func.now()
    )
