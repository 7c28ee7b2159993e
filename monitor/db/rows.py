"""A batch's records as the rows of their tables, validated before any write.

:class:`BatchRows` turns a :class:`~monitor.engine.batch.Batch` into row dicts (one list per
table, inserted in foreign-key order by :func:`monitor.db.store.persist_batch`); a record that
cannot be stored as given (a NaN statistic, a non-finite metric, a negative offset, a checkpoint
filed under another stream's name) raises :class:`~monitor.db.errors.InvalidRecordError` before
the transaction begins.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from monitor.db.errors import InvalidRecordError
from monitor.db.models import (
    AlarmRevisionRow,
    AlarmRow,
    Base,
    DeadLetterRow,
    OODFlagRow,
    OODWindowRow,
    PerformanceWindowRow,
    TracePointRow,
    event_key,
    source_key,
    utcnow,
)
from monitor.engine.batch import Batch
from monitor.streams.records import (
    Alarm,
    DeadLetter,
    OODWindow,
    PerformanceWindow,
    SourceOffset,
    TracePoint,
)
from monitor.streams.state import Checkpoint

__all__ = ["BatchRows", "Row"]

Row = dict[str, Any]


@dataclass(slots=True)
class BatchRows:
    """A batch turned into row dicts, validated before any write."""

    alarms: list[Row]
    alarm_revisions: list[Row]
    revised: list[Row]
    trace_points: list[Row]
    ood_windows: list[Row]
    ood_flags: list[Row]
    dead_letters: list[Row]
    checkpoints: list[Row]
    pieces: dict[str, dict[str, bytes]]  # by stream: the pieces its checkpoint's ``chunks`` name
    offsets: list[Row]
    performance_windows: list[Row]

    @classmethod
    def of(cls, batch: Batch) -> BatchRows:
        """The rows of ``batch``; raises :class:`InvalidRecordError` for a record that cannot be
        stored as given."""
        now = utcnow()
        pieces: dict[str, dict[str, bytes]] = {s: {} for s in batch.checkpoints}
        return cls(
            alarms=[_alarm_row(a, now) for a in batch.alarms if a.revision == 1],
            alarm_revisions=[_alarm_revision_row(a, now) for a in batch.alarms],
            revised=[_alarm_row(a, now) for a in batch.alarms if a.revision > 1],
            trace_points=[_trace_row(t, now) for t in batch.trace_points],
            ood_windows=[_ood_window_row(w, now) for w in batch.ood_windows],
            ood_flags=[_ood_flag_row(w, e) for w in batch.ood_windows for e in w.flagged_ids],
            dead_letters=[_dead_letter_row(d, now) for d in batch.dead_letters],
            checkpoints=[_checkpoint_row(s, c, now, pieces[s])
                         for s, c in batch.checkpoints.items()],
            pieces=pieces,
            offsets=_offset_rows(batch.offsets, now),
            performance_windows=[_performance_row(w) for w in batch.performance_windows],
        )

    def inserts(self) -> Iterable[tuple[type[Base], list[Row]]]:
        """Insert-if-absent tables in foreign-key order, with their rows."""
        yield AlarmRow, self.alarms
        yield AlarmRevisionRow, self.alarm_revisions
        yield TracePointRow, self.trace_points
        yield OODWindowRow, self.ood_windows
        yield OODFlagRow, self.ood_flags
        yield DeadLetterRow, self.dead_letters
        yield PerformanceWindowRow, self.performance_windows



def _alarm_row(alarm: Alarm, now: datetime) -> Row:
    for name in ("statistic", "threshold"):
        if math.isnan(getattr(alarm, name)):
            raise InvalidRecordError(f"alarm {alarm.id} ({alarm.stream}) has a NaN {name}")
    return {
        "id": alarm.id,
        "stream": alarm.stream,
        "detector": alarm.detector,
        "kind": alarm.kind,
        "event_id": alarm.event_id,
        "event_index": alarm.event_index,
        "ts": alarm.ts,
        "changepoint": alarm.changepoint,
        "statistic": alarm.statistic,
        "threshold": alarm.threshold,
        "rule": alarm.rule,
        "evidence": alarm.evidence,
        "created_at": now,
        "revision": alarm.revision,
        "revised_at": alarm.revised_at,
    }


def _alarm_revision_row(alarm: Alarm, now: datetime) -> Row:
    return {
        "alarm_id": alarm.id,
        "revision": alarm.revision,
        "kind": alarm.kind,
        "evidence": alarm.evidence,
        "revised_at": alarm.revised_at,
        "created_at": now,
    }


def _trace_row(point: TracePoint, now: datetime) -> Row:
    # SQLite turns NaN into NULL by itself; doing it here makes PostgreSQL agree.
    return {
        "stream": point.stream,
        "detector": point.detector,
        "event_index": point.event_index,
        "ts": point.ts,
        "log_martingale": _nan_to_none(point.log_martingale),
        "p_value": _nan_to_none(point.p_value),
        "log_statistic": _nan_to_none(point.log_statistic),
        "log_threshold": _nan_to_none(point.log_threshold),
        "weights_ess": _nan_to_none(point.weights_ess),
        "config_version": point.config_version,
        "created_at": now,
    }


def _span(window: OODWindow | PerformanceWindow) -> Row:
    """The columns a window of a stream's events has, OOD or performance."""
    return {
        "stream": window.stream,
        "window_index": window.window_index,
        "start_index": window.start_index,
        "end_index": window.end_index,
        "ts": window.ts,
        "n": window.n,
    }


def _ood_window_row(window: OODWindow, now: datetime) -> Row:
    return {
        **_span(window),
        "n_flagged": window.n_flagged,
        "threshold": _nan_to_none(window.threshold),
        "rule": window.rule,
        "alpha": window.alpha,
        "created_at": now,
    }


def _performance_row(window: PerformanceWindow) -> Row:
    metrics = {}
    for name, value in window.metrics.items():
        if not math.isfinite(value):
            raise InvalidRecordError(
                f"performance window {window.window_index} of {window.stream}: metric {name} "
                f"is {value} (metrics must be finite)"
            )
        metrics[name] = float(value)
    return {**_span(window), "metrics": metrics}


def _ood_flag_row(window: OODWindow, event_id: str) -> Row:
    key = event_key(event_id)
    return {"stream": window.stream, "window_index": window.window_index, "event_id": key,
            "full_event_id": None if key == event_id else event_id}


def _dead_letter_row(letter: DeadLetter, now: datetime) -> Row:
    return {
        "source": source_key(letter.source),
        "source_name": letter.source,
        "partition": letter.partition,
        "offset": letter.offset,
        "reason": letter.reason,
        "payload": bytes(letter.payload[: DeadLetter.MAX_PAYLOAD]),
        "stream": letter.stream,
        "ts": letter.ts,
        "ts_source": letter.ts_source,
        "created_at": now,
    }


def _checkpoint_row(
    stream: str, checkpoint: Checkpoint, now: datetime, pieces: dict[str, bytes]
) -> Row:
    """The checkpoint's row; the pieces of its large arrays are added to ``pieces``."""
    if checkpoint.stream != stream:
        raise InvalidRecordError(
            f"checkpoint of stream {checkpoint.stream!r} was passed under key {stream!r}"
        )
    text, blob = checkpoint.encode(pieces)
    return {
        "stream": stream,
        "version": checkpoint.version,
        "event_index": checkpoint.event_index,
        "state": text,
        "arrays": blob,
        "chunks": " ".join(sorted(pieces)) or None,
        "updated_at": now,
    }


def _offset_rows(offsets: Sequence[SourceOffset], now: datetime) -> list[Row]:
    latest: dict[tuple[str, int], int] = {}
    for o in offsets:
        if o.offset < 0:
            raise InvalidRecordError(f"offset of {o.source} partition {o.partition} is negative")
        latest[(o.source, o.partition)] = o.offset
    return [
        {"source": source_key(s), "source_name": s, "partition": p, "offset": v, "updated_at": now}
        for (s, p), v in latest.items()
    ]


def _nan_to_none(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value
