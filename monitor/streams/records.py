"""Result records produced by the pipeline and consumed by persistence, the API and the CLI.

These are plain, immutable data classes with no I/O. Every record has ``to_json()`` returning
JSON-ready builtins (datetimes as ISO 8601 strings in UTC).
"""

from __future__ import annotations

import math
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

#: Who raised an alarm: the covariate and conditional monitors, the OOD decision, the
#: data-quality monitor (per-feature missing / unseen / out-of-range rates) and the schema
#: watch (a key the calibration never had, a declared feature absent from the events).
Detector = Literal["covariate", "conditional", "ood", "data_quality", "schema"]
#: An alarm's kind: the shift diagnosis of a covariate or conditional alarm
#: (:data:`monitor.core.diagnosis.DIAGNOSIS_KINDS`), ``data_quality`` or ``schema_change``.
AlarmKind = Literal[
    "concept_shift",
    "extreme_covariate_shift",
    "benign_covariate_shift",
    "insufficient_evidence",
    "data_quality",
    "schema_change",
]

DETECTORS: tuple[str, ...] = get_args(Detector)
ALARM_KINDS: tuple[str, ...] = get_args(AlarmKind)
#: The kinds each detector raises (a covariate alarm is never a concept shift; the OOD decision
#: flags events, it raises no alarm).
KINDS_OF_DETECTOR: dict[str, tuple[str, ...]] = {
    "covariate": ("extreme_covariate_shift", "benign_covariate_shift", "insufficient_evidence"),
    "conditional": ("concept_shift", "extreme_covariate_shift", "insufficient_evidence"),
    "ood": (),
    "data_quality": ("data_quality",),
    "schema": ("schema_change",),
}

#: Namespace for deterministic alarm ids: replaying the same events yields the same ids, which
#: makes storing an alarm idempotent (a replay after a crash never stores it twice).
ALARM_NAMESPACE = uuid.UUID("6f6b1d52-3a51-4f0e-9a43-0c4e2a8f5d10")

#: Largest finite value written for a statistic; larger values (including +inf) are clipped so
#: that every record is valid JSON. The exact value is kept in log space in ``evidence``.
MAX_STATISTIC = 1e300


def alarm_id(stream: str, detector: str, event_index: int) -> str:
    """Deterministic alarm id from where it was raised."""
    return str(uuid.uuid5(ALARM_NAMESPACE, f"{stream}\x1f{detector}\x1f{event_index}"))


def finite(value: float) -> float:
    """Clip a statistic to a finite JSON-safe float (nan stays nan for the caller to handle)."""
    if math.isnan(value):
        return value
    return max(-MAX_STATISTIC, min(MAX_STATISTIC, value))


def iso(ts: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` suffix."""
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Alarm:
    """One alarm with its diagnosis (README "HTTP API", docs/api.md).

    ``revision`` is 1 when the alarm is raised; a revision (the kind decided once an
    ``insufficient_evidence`` alarm's evidence is complete) is the same alarm (same ``id``,
    ``event_id``, ``ts``) with the new ``kind`` and ``evidence``, ``revision`` + 1 and
    ``revised_at``, the time of the event that completed the evidence.
    """

    stream: str
    detector: str
    kind: str
    event_id: str
    event_index: int
    ts: datetime
    changepoint: int | None
    statistic: float
    threshold: float
    rule: str
    evidence: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    revision: int = 1
    revised_at: datetime | None = None

    def __post_init__(self) -> None:
        if not self.id:
            object.__setattr__(self, "id", alarm_id(self.stream, self.detector, self.event_index))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ts"] = iso(self.ts)
        out["statistic"] = finite(self.statistic)
        out["revised_at"] = None if self.revised_at is None else iso(self.revised_at)
        return {"id": out.pop("id"), **out}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Alarm:
        """The alarm of :meth:`to_json` output."""
        revised = data.get("revised_at")
        return cls(**{
            **data,
            "ts": datetime.fromisoformat(data["ts"]),
            "revised_at": None if revised is None else datetime.fromisoformat(revised),
        })


@dataclass(frozen=True, slots=True)
class TracePoint:
    """One (downsampled) point of a detector's trace."""

    stream: str
    detector: str
    event_index: int
    ts: datetime
    log_martingale: float
    p_value: float
    log_statistic: float
    log_threshold: float
    weights_ess: float | None = None
    #: The stream's configuration version in force (None: written before versions were kept).
    config_version: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ts"] = iso(self.ts)
        return out


@dataclass(frozen=True, slots=True)
class OODWindow:
    """The OOD decision over one window of a stream's events."""

    stream: str
    window_index: int
    start_index: int
    end_index: int
    ts: datetime
    n: int
    n_flagged: int
    threshold: float
    rule: str
    alpha: float
    flagged_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ts"] = iso(self.ts)
        out["flagged_ids"] = list(self.flagged_ids)
        return out


@dataclass(frozen=True, slots=True)
class PerformanceWindow:
    """The model's metrics over one window of a stream's labelled events (docs/explain.md):
    ``start_index``/``end_index`` the smallest and largest event index of its events, ``ts``
    the event time of the window's last labelled event (its prediction's time), ``metrics``
    metric name → value."""

    stream: str
    window_index: int
    start_index: int
    end_index: int
    ts: datetime
    n: int
    metrics: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ts"] = iso(self.ts)
        return out


@dataclass(frozen=True, slots=True)
class AlarmEvidence:
    """Evidence that completes an alarm after it was raised (its feature attribution needs the
    events after it); merged into the stored alarm's ``evidence``."""

    stream: str
    alarm_id: str
    evidence: dict[str, Any] = field(default_factory=dict)
    #: Event time of the prediction that completed the evidence (the revision's ``revised_at``).
    ts: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ts"] = None if self.ts is None else iso(self.ts)
        return out


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record that could not be processed, kept with the reason and where it came from."""

    source: str
    partition: int
    offset: int
    reason: str
    payload: bytes
    ts: datetime
    stream: str | None = None
    #: Where ``ts`` came from: ``event`` (the record's own ts), ``broker`` or ``ingest``.
    ts_source: str = "ingest"

    #: Payloads are truncated to this many bytes before they are stored.
    MAX_PAYLOAD = 4096

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "partition": self.partition,
            "offset": self.offset,
            "reason": self.reason,
            "payload": self.payload[: self.MAX_PAYLOAD].decode("utf-8", errors="replace"),
            "ts": iso(self.ts),
            "ts_source": self.ts_source,
            "stream": self.stream,
        }


@dataclass(frozen=True, slots=True)
class SourceOffset:
    """Next offset to read for one partition of a source (``offset`` = last processed + 1)."""

    source: str
    partition: int
    offset: int
