"""Calibration data of a stream: labeled prediction events from the model's validation data."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import MonitorError
from monitor.streams.events import InvalidEvent, PredictionEvent, decode_event


class CalibrationError(MonitorError, ValueError):
    """Calibration data that cannot be used; the message says which line and why."""


@dataclass(frozen=True)
class Calibration:
    """Arrays of a stream's calibration events (all rows labeled).

    ``predictions`` is ``(n,)`` for regression and ``(n, C)`` for classification; ``logits`` and
    ``embedding`` are present only when every calibration event carries them, and so is
    ``scales`` (the model's predicted scale of its error, ``(n,)``: the ``normalized_residual``
    score needs it on every row).
    """

    features: np.ndarray
    predictions: np.ndarray
    labels: np.ndarray
    feature_names: tuple[str, ...] | None = None
    logits: np.ndarray | None = None
    embedding: np.ndarray | None = None
    scales: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def n_classes(self) -> int | None:
        return int(self.predictions.shape[1]) if self.predictions.ndim == 2 else None

    def inputs(self) -> dict[str, np.ndarray]:
        """Arrays by OOD input kind (``features``, ``logits``, ``embedding``)."""
        out = {"features": self.features}
        if self.logits is not None:
            out["logits"] = self.logits
        if self.embedding is not None:
            out["embedding"] = self.embedding
        return out

    @classmethod
    def from_events(
        cls, events: Sequence[PredictionEvent], feature_names: Sequence[str] | None = None
    ) -> Calibration:
        """From prediction events. Object features are ordered by ``feature_names`` where given
        (a stored stream's order: a JSON object read back from PostgreSQL's JSONB has its keys
        in JSONB's own order, not the order they were written in), else by the first event's
        keys as they were written (a file's or a Python dict's order)."""
        if len(events) < 20:
            raise CalibrationError(
                f"calibration needs at least 20 labeled events, got {len(events)}"
            )
        unlabeled = [e.id for e in events if e.label is None]
        if unlabeled:
            raise CalibrationError(
                f"calibration events must carry a label; {unlabeled[0]!r} has none"
            )
        names = _feature_order(events[0].features, feature_names)
        try:
            features = np.stack([e.feature_vector(names) for e in events])
            predictions = np.asarray([e.prediction for e in events], dtype=float)
        except (ValueError, InvalidEvent) as exc:
            raise CalibrationError(f"calibration events disagree in shape: {exc}") from None
        labels = np.asarray([e.label for e in events])
        return cls(
            features=features,
            predictions=predictions,
            labels=labels,
            feature_names=names,
            logits=_optional(events, "logits"),
            embedding=_optional(events, "embedding"),
            scales=_optional(events, "scale"),
        )

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[dict[str, Any] | bytes | str],
        feature_names: Sequence[str] | None = None,
    ) -> Calibration:
        """From wire-format events (``kind`` defaults to ``prediction``); ``feature_names`` as
        in :meth:`from_events`."""
        events = []
        for i, row in enumerate(rows):
            if isinstance(row, dict):
                row = {"kind": "prediction", "stream": "calibration", "id": str(i), **row}
            try:
                event = decode_event(row, max_bytes=1 << 30)
            except InvalidEvent as exc:
                raise CalibrationError(f"calibration row {i}: {exc}") from None
            if not isinstance(event, PredictionEvent):
                raise CalibrationError(f"calibration row {i} is not a prediction event")
            events.append(event)
        return cls.from_events(events, feature_names)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> Calibration:
        try:
            with open(path, "rb") as fh:
                lines = [line for line in fh if line.strip()]
        except OSError as exc:
            raise CalibrationError(f"cannot read calibration file {path}: {exc.strerror}") from None
        return cls.from_rows(lines)

    def to_rows(self) -> list[dict[str, Any]]:
        """Wire-format rows (for storing the calibration with the stream)."""
        rows = []
        for i in range(len(self)):
            row: dict[str, Any] = {
                "features": _features(self.features[i], self.feature_names),
                "prediction": _plain(self.predictions[i]),
                "label": _plain(self.labels[i]),
            }
            if self.logits is not None:
                row["logits"] = self.logits[i].tolist()
            if self.embedding is not None:
                row["embedding"] = self.embedding[i].tolist()
            if self.scales is not None:
                row["scale"] = float(self.scales[i])
            rows.append(row)
        return rows


def _feature_order(
    first: list[float] | dict[str, float], given: Sequence[str] | None
) -> tuple[str, ...] | None:
    """The features' names in the stream's order: ``given``, checked against the first row's
    keys, else the first row's keys in the order they were written; ``None`` for list
    features."""
    if not isinstance(first, dict):
        if given is not None:
            raise CalibrationError(
                "calibration features are lists, but a feature order was given"
            )
        return None
    if given is None:
        return tuple(first)
    names = tuple(str(name) for name in given)
    if len(set(names)) != len(names) or set(names) != set(first):
        raise CalibrationError(
            f"the stored feature order {list(names)} does not name the calibration's "
            f"features {sorted(first)}"
        )
    return names


def _optional(events: Sequence[PredictionEvent], name: str) -> np.ndarray | None:
    values = [getattr(e, name) for e in events]
    if any(v is None for v in values):
        return None
    try:
        return np.asarray(values, dtype=float)
    except ValueError:
        raise CalibrationError(f"calibration '{name}' vectors differ in length") from None


def _features(row: np.ndarray, names: tuple[str, ...] | None) -> list[float] | dict[str, float]:
    if names is None:
        return row.tolist()
    return dict(zip(names, row.tolist(), strict=True))


def _plain(value: Any) -> Any:
    return value.tolist() if isinstance(value, np.ndarray | np.generic) else value
