"""Request and response bodies of the HTTP API (separate from the database models).

Lists share one shape: ``data`` (the page), ``count`` (how many rows match the filters in all
pages) and, for keyset-paginated lists, ``count_exact`` and ``next_cursor`` (pass it back as
``cursor`` for the next page; ``null`` on the last page). Paginated lists count exactly up to
10 000 rows; beyond, ``count`` is 10 000 and ``count_exact`` is false, so that a page costs the
same whatever the size of the table.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from monitor.streams.config import NAME_PATTERN, StreamConfig
from monitor.streams.records import AlarmKind, Detector

__all__ = [
    "AckRequest",
    "AlarmDetail",
    "AlarmPublic",
    "AlarmRevisionPublic",
    "AlarmsPublic",
    "AlertDeliveriesPublic",
    "AlertDeliveryPublic",
    "DeadLetterItem",
    "ErrorResponse",
    "EventsAccepted",
    "Health",
    "OODWindowPublic",
    "OODWindowsPublic",
    "PerformanceWindowPublic",
    "PerformanceWindowsPublic",
    "StreamCreate",
    "StreamPublic",
    "StreamsPublic",
    "TracePointPublic",
    "TracePublic",
]

#: The query parameters' enums (``?detector=``, ``?kind=``) are the alarm record's.
DetectorName = Detector
AlarmKindName = AlarmKind
StreamName = Annotated[str, Field(pattern=NAME_PATTERN, examples=["bikes"])]

ALARM_EXAMPLE: dict[str, Any] = {
    "id": "0b1e7a3c-5f7e-5d41-9a43-3d2f1c0e9b77",
    "stream": "bikes",
    "detector": "conditional",
    "kind": "concept_shift",
    "event_id": "e-000517",
    "event_index": 517,
    "ts": "2026-11-30T12:08:37Z",
    "changepoint": 301,
    "statistic": 10342.7,
    "threshold": 10000.0,
    "rule": "shiryaev_roberts",
    "evidence": {"covariate_statistic": 3.1, "penalised_fraction": 0.0, "weights_ess": 812.4},
    "acknowledged_at": None,
    "acknowledged_by": None,
    "revision": 1,
    "revised_at": None,
}

CALIBRATION_ROW_EXAMPLE: dict[str, Any] = {
    "features": [0.3, 1.2, 5.0],
    "prediction": 41.7,
    "label": 44.0,
}


COUNT_DOC = "{what} matching the filters in all pages, counted exactly up to 10 000."
COUNT_EXACT_DOC = "False when more than 10 000 match (`count` is then 10 000)."


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer except 422: one human-readable sentence."""

    detail: str = Field(examples=["alarm '0b1e7a3c-…' not found"])


class Health(BaseModel):
    """Liveness and database reachability."""

    status: Literal["ok", "degraded"] = Field(examples=["ok"])
    database: Literal["ok", "unreachable"] = Field(examples=["ok"])
    version: str = Field(examples=["0.1.0"])


class AlarmPublic(BaseModel):
    """An alarm (docs/api.md) with its acknowledgement."""

    model_config = ConfigDict(json_schema_extra={"examples": [ALARM_EXAMPLE]})

    id: str
    stream: str
    detector: str = Field(
        description="`covariate`, `conditional`, `ood`, `data_quality` or `schema`."
    )
    kind: str = Field(
        description="`concept_shift`, `extreme_covariate_shift`, "
        "`benign_covariate_shift` (informational: the monitor adapted), "
        "`insufficient_evidence` (too few events to decide yet: the alarm is revised with the "
        "decided kind once the next events complete its evidence), `data_quality` (a "
        "feature's missing, unseen-category or out-of-range rate rose above its calibration "
        "rate; `evidence.indicators` names the features) or `schema_change` (a key the "
        "calibration never had, or a declared feature absent from the events; "
        "`evidence.key` names it)."
    )
    event_id: str
    event_index: int = Field(ge=0, description="The stream's events counted from 0.")
    ts: datetime
    changepoint: int | None = Field(description="Estimated event index where the change began.")
    statistic: float = Field(description="The alarm rule's statistic when it fired.")
    threshold: float
    rule: str = Field(examples=["shiryaev_roberts"])
    evidence: dict[str, Any] = Field(description="Diagnosis evidence (detector specific).")
    acknowledged_at: datetime | None = None
    acknowledged_by: str | None = None
    revision: int = Field(
        default=1, ge=1, description="1 as raised; one more at each revision of the diagnosis."
    )
    revised_at: datetime | None = Field(
        default=None,
        description="Time of the event that completed the evidence of the latest revision "
        "(null for revision 1).",
    )
    fleet: str | None = Field(
        default=None, description="The fleet whose cross-stream rule admitted the alarm; null "
        "for a stream's own alarm (docs/algorithms.md, Fleets)."
    )
    fleet_rule: str | None = Field(
        default=None, description="`e_d_bh`, `e_d_bonferroni` or `per_stream`; null if no fleet."
    )
    fleet_level: float | None = Field(
        default=None, description="The fleet rule's EOP level alpha; null if no fleet."
    )


class AlarmRevisionPublic(BaseModel):
    """One version of an alarm's diagnosis."""

    revision: int = Field(ge=1)
    kind: str
    evidence: dict[str, Any]
    revised_at: datetime | None = None


class AlarmDetail(AlarmPublic):
    """An alarm with every version of its diagnosis (``GET /alarms/{id}``)."""

    revisions: list[AlarmRevisionPublic] = Field(
        description="Every version, revision 1 (as raised) first; the last one is the alarm's."
    )


class AlarmsPublic(BaseModel):
    """A page of alarms, newest first."""

    data: list[AlarmPublic]
    count: int = Field(ge=0, description=COUNT_DOC.format(what="Alarms"))
    count_exact: bool = Field(description=COUNT_EXACT_DOC)
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null on the last page."
    )


class AckRequest(BaseModel):
    """Optional details of an acknowledgement."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"by": "alice"}]})

    by: (
        Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f]+$")] | None
    ) = Field(
        default=None,
        description="Who acknowledges; defaults to `token:<id>` of the bearer token.",
    )


class StreamCreate(StreamConfig):
    """A stream configuration (docs/api.md, `POST /streams`) with inline calibration rows.

    ``calibration`` must be a list of labeled wire-format prediction events (``features``,
    ``prediction``, ``label``; optional ``logits``, ``embedding``); at least 20. A server-side
    file path is refused: an HTTP client must not be able to make the server read its files.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={
            "examples": [
                {
                    "name": "bikes",
                    "task": "regression",
                    "calibration": [CALIBRATION_ROW_EXAMPLE] * 20,
                    "alarm": {"rule": "shiryaev_roberts", "threshold": 10000},
                }
            ]
        },
    )

    calibration: Annotated[list[dict[str, Any]], Field(min_length=20, max_length=100_000)]


class StreamPublic(BaseModel):
    """A registered stream: configuration (without its calibration rows) and progress."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "name": "bikes",
                    "task": "regression",
                    "version": 1,
                    "config": {
                        "name": "bikes",
                        "task": "regression",
                        "score": "abs_residual",
                        "covariate_score": "knn",
                        "betting": "composite_jumper",
                        "alarm": {"rule": "shiryaev_roberts", "threshold": 10000.0, "alpha": 0.01},
                    },
                    "calibration_events": 500,
                    "events": 12840,
                    "alarms": 2,
                    "last_event_at": "2026-11-30T12:08:37Z",
                    "created_at": "2026-11-30T09:00:00Z",
                    "updated_at": "2026-11-30T09:00:00Z",
                    "events_without_ts": 0,
                    "warnings": [],
                }
            ]
        }
    )

    name: str
    task: Literal["regression", "classification"]
    version: int = Field(
        ge=1,
        description="Configuration version: 1 at registration, + 1 at each `PUT` that changed "
        "the configuration or the calibration rows.",
    )
    config: dict[str, Any] = Field(description="The stream configuration without `calibration`.")
    calibration_events: int = Field(ge=0)
    events: int = Field(ge=0, description="Events processed so far (from the checkpoint).")
    alarms: int = Field(ge=0)
    last_event_at: datetime | None = Field(description="When the checkpoint was last written.")
    created_at: datetime
    updated_at: datetime
    events_without_ts: int | None = Field(
        default=None, ge=0,
        description="Events processed without a `ts` (from the checkpoint; they were timed by "
        "the broker or at ingest, and a time budget ran them on its event-count threshold). "
        "`GET /streams/{name}` only: null in the list.",
    )
    warnings: list[str] | None = Field(
        default=None,
        description="What the stream's operator should fix, one sentence each (events without "
        "`ts`). `GET /streams/{name}` only: null in the list.",
    )


class StreamsPublic(BaseModel):
    """Every registered stream, by name."""

    data: list[StreamPublic]
    count: int = Field(ge=0)


class TracePointPublic(BaseModel):
    """A point of a detector's trace; values that are undefined are null."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detector": "conditional",
                    "event_index": 510,
                    "ts": "2026-11-30T12:08:30Z",
                    "log_martingale": 8.9,
                    "p_value": 0.004,
                    "log_statistic": 9.1,
                    "log_threshold": 9.21,
                    "weights_ess": 812.4,
                }
            ]
        }
    )

    detector: str = Field(description="`covariate`, `conditional` or `ood`.")
    event_index: int = Field(ge=0)
    ts: datetime
    log_martingale: float | None
    p_value: float | None
    log_statistic: float | None = Field(description="log of the alarm rule's statistic.")
    log_threshold: float | None
    weights_ess: float | None


class TracePublic(BaseModel):
    """A downsampled trace: at most ``max_points`` points per detector.

    Each bucket of ``bucket_events`` consecutive stored points keeps its point with the largest
    statistic (so a threshold crossing is never hidden by downsampling), and the latest point of
    each detector is always kept.
    """

    stream: str
    data: list[TracePointPublic]
    count: int = Field(ge=0, description="Points returned.")
    stored: int = Field(ge=0, description="Stored points in the requested range.")
    downsampled: bool


class OODWindowPublic(BaseModel):
    """The OOD decision over one window of a stream's events."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "window_index": 12,
                    "start_index": 3072,
                    "end_index": 3328,
                    "ts": "2026-11-30T12:05:00Z",
                    "n": 256,
                    "n_flagged": 3,
                    "threshold": 0.0012,
                    "rule": "eg_bh",
                    "alpha": 0.1,
                    "flagged_ids": ["e-3101", "e-3177", "e-3290"],
                }
            ]
        }
    )

    window_index: int = Field(ge=0)
    start_index: int = Field(ge=0)
    end_index: int = Field(ge=0)
    ts: datetime
    n: int = Field(ge=0)
    n_flagged: int = Field(ge=0)
    threshold: float | None = Field(description="p-value threshold of the decision rule.")
    rule: str
    alpha: float
    flagged_ids: list[str]


class OODWindowsPublic(BaseModel):
    """A page of a stream's OOD windows, newest first."""

    stream: str
    data: list[OODWindowPublic]
    count: int = Field(ge=0, description=COUNT_DOC.format(what="Windows"))
    count_exact: bool = Field(description=COUNT_EXACT_DOC)
    next_cursor: str | None


class PerformanceWindowPublic(BaseModel):
    """The model's metrics over one window of a stream's labelled events (docs/explain.md)."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "window_index": 3,
                    "start_index": 1480,
                    "end_index": 2011,
                    "ts": "2026-11-30T12:05:00Z",
                    "n": 500,
                    "metrics": {"mae": 1.92, "rmse": 4.31},
                }
            ]
        }
    )

    window_index: int = Field(ge=0)
    start_index: int = Field(ge=0, description="Smallest event index of the window's events.")
    end_index: int = Field(ge=0, description="Largest event index of the window's events.")
    ts: datetime = Field(
        description="Event time of the window's last labelled event (its prediction's time)."
    )
    n: int = Field(ge=1, description="Labelled events in the window.")
    metrics: dict[str, float] = Field(
        description="Regression: `mae`, `rmse`; classification: `accuracy`, `log_loss`, "
        "`recall_class_K` for each class K present in the window."
    )


class PerformanceWindowsPublic(BaseModel):
    """A stream's latest performance windows, oldest first."""

    stream: str
    data: list[PerformanceWindowPublic]
    count: int = Field(ge=0, description="Windows returned.")


class DeadLetterItem(BaseModel):
    """An item of a POST /events batch that was not processed, and why."""

    index: int = Field(ge=0, description="Position of the item in the request body.")
    reason: str = Field(examples=["unknown stream 'bikez'"])


class EventsAccepted(BaseModel):
    """What a POST /events batch did."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "accepted": 2,
                    "dead_letters": [{"index": 2, "reason": "field 'features': Field required"}],
                    "duplicates": [],
                    "alarms": [],
                    "replayed": False,
                }
            ]
        }
    )

    accepted: int = Field(ge=0, description="Items processed by their stream's monitors.")
    dead_letters: list[DeadLetterItem]
    duplicates: list[int] = Field(
        default_factory=list,
        description="Indexes of items skipped because an earlier request processed the same "
        "(stream, kind, id) within the de-duplication window.",
    )
    alarms: list[AlarmPublic] = Field(
        description="Alarms raised by this batch, and the revisions it decided (`revision` > 1)."
    )
    replayed: bool = Field(
        default=False,
        description="This is the stored answer of an earlier request with the same "
        "Idempotency-Key; nothing was processed now.",
    )


DeliveryStatus = Literal["pending", "delivered", "dead"]


class AlertDeliveryPublic(BaseModel):
    """One alarm's delivery to one alert receiver (a row of the outbox)."""

    model_config = ConfigDict(from_attributes=True)

    id: int = Field(description="Delivery id (for `POST /alerts/deliveries/{id}/retry`).")
    alarm_id: str
    receiver: str = Field(description="The receiver's name in the routing file.")
    receiver_type: Literal["webhook", "slack", "alertmanager"]
    idempotency_key: str = Field(description="`X-Monitor-Idempotency-Key` of every attempt.")
    status: DeliveryStatus = Field(
        description="`pending` (queued or waiting for a retry), `delivered` or `dead` (gave up)."
    )
    attempts: int = Field(ge=0, description="Attempts made so far.")
    next_attempt_at: datetime = Field(description="When a pending delivery is next attempted.")
    last_status_code: int | None = Field(description="HTTP status of the last answer.")
    last_error: str | None = Field(description="Why the last attempt got no answer.")
    created_at: datetime
    delivered_at: datetime | None


class AlertDeliveriesPublic(BaseModel):
    """A page of alert deliveries, newest first."""

    data: list[AlertDeliveryPublic]
    count: int = Field(ge=0, description=COUNT_DOC.format(what="Deliveries"))
    count_exact: bool = Field(description=COUNT_EXACT_DOC)
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null on the last page."
    )


class FleetCreate(BaseModel):
    """A fleet to register (docs/operations.md "Fleets"): the fleet file's fields."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{
            "name": "payments", "rule": "e_d_bh", "alpha": 0.0001,
            "members": ["card-eu/conditional", "card-us/conditional"],
        }]},
    )

    name: StreamName
    rule: Literal["e_d_bh", "e_d_bonferroni", "per_stream"] = "e_d_bh"
    alpha: Annotated[float, Field(gt=0.0, lt=1.0, description="EOP level.")] = 1e-4
    members: Annotated[
        list[Annotated[str, Field(max_length=200)]],
        Field(min_length=1, max_length=10_000, description="`stream/detector` names."),
    ]


class FleetPublic(BaseModel):
    """A stored fleet."""

    name: str
    rule: str
    alpha: float = Field(description="EOP level: the error at any time is at most alpha × E[T].")
    members: list[str]
    evaluated_through: datetime | None = Field(
        description="Event time through which the rule has been decided (null: not yet)."
    )
    created_at: datetime


class FleetsPublic(BaseModel):
    """Every stored fleet, by name."""

    data: list[FleetPublic]
    count: int = Field(ge=0)
