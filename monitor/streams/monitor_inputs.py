"""What :class:`monitor.streams.monitor.StreamMonitor` checks before an event changes anything:
its features, OOD inputs, prediction, scale and label against the stream's calibration, a replayed
event the stream already processed, and the label of a prediction made under another
configuration version. A check that fails raises :class:`InvalidEvent` with the reason the
event's dead letter carries.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from monitor.core.scores import SCALED_RESIDUALS
from monitor.streams.calibration import Calibration, CalibrationError
from monitor.streams.config import StreamConfig
from monitor.streams.events import FLOAT_ONLY, InvalidEvent, PredictionEvent
from monitor.streams.join import LabelJoin, Pending
from monitor.streams.schema import FeatureRow

__all__ = ["ALREADY_PROCESSED", "ConfiguredStream", "InputChecks", "check_calibration"]

#: How the reason begins when a replay refuses an event the stream already processed
#: (:attr:`StreamMonitor.refuse_processed`; ``monitor.cli.dead_letters`` counts these as
#: skipped).
ALREADY_PROCESSED = "already processed"


class ConfiguredStream:
    """What every part of :class:`monitor.streams.monitor.StreamMonitor` reads: its
    configuration, calibration and the names they give (set by its constructor)."""

    config: StreamConfig
    config_version: int
    calibration: Calibration

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The features' names: the calibration's, else ``x0``, ``x1``, … by position."""
        names = self.calibration.feature_names
        return names if names is not None else tuple(
            f"x{j}" for j in range(self.calibration.n_features)
        )


class InputChecks(ConfiguredStream):
    """The input checks of :class:`monitor.streams.monitor.StreamMonitor` (a mixin)."""

    join: LabelJoin
    refuse_processed: bool

    def _check_not_processed(self, kind: str, event_id: str) -> None:
        """With :attr:`refuse_processed` (a replay), refuse an event of ``kind`` and
        ``event_id`` that the stream's label join still knows (waiting, or joined within the
        join's bounds), before any state changes."""
        if self.refuse_processed and self.join.processed(kind, event_id):
            raise InvalidEvent(
                f"{ALREADY_PROCESSED}: stream {self.name!r} has processed a {kind} with id "
                f"{event_id!r} within its label-join window"
            )

    def _check_made_under(self, pending: Pending | None) -> None:
        """Refuse the label of a waiting prediction (``pending``; None: none waits) made under
        an earlier configuration version whose features this version's detectors cannot use
        (other names, or, where the state did not keep the names, another number):
        :class:`InvalidEvent`, so the label is a dead letter with this reason and changes
        nothing — the prediction waits on until the join expires it. Labels of predictions made
        under a version with the same features join as usual."""
        made = None if pending is None else self.join.made_under(pending.event_id)
        if pending is None or made is None:
            return
        version, names = made
        if names is None:
            if len(pending.features) == self.calibration.n_features:
                return
            before = f"{len(pending.features)} values"
        elif names == self.feature_names:
            return
        else:
            before = _listed(names)
        raise InvalidEvent(
            f"label of prediction {pending.event_id!r} made under configuration version "
            f"{version}, whose features ({before}) the version {self.config_version} "
            f"detectors ({_listed(self.feature_names)}) cannot use"
        )

    def _read_features(self, event: PredictionEvent) -> tuple[list[float], FeatureRow | None]:
        """The event's code row (docs/tabular.md) and, when the schema read it, the
        :class:`FeatureRow` (its data-quality indicators and keys). Numbers in the stream's
        order and width take today's path (:meth:`_feature_list`), with today's messages."""
        schema = self.calibration.schema
        features = event.features
        if schema.is_plain:
            values = (features.values() if isinstance(features, dict) else features)
            names = self.calibration.feature_names
            if set(map(type, values)) == FLOAT_ONLY and (
                    not isinstance(features, dict) or names is None
                    or (len(features) == len(names) and all(n in features for n in names))):
                return self._feature_list(event), None
        if isinstance(features, list) and len(features) != self.calibration.n_features:
            raise InvalidEvent(
                f"wrong feature dimension: got {len(features)}, "
                f"stream {self.name!r} expects {self.calibration.n_features}"
            )
        read = schema.read(features)
        return read.codes, read

    def _feature_list(self, event: PredictionEvent) -> list[float]:
        """The event's features in the stream's order, checked against its width (a list: the
        batch path builds one matrix per batch)."""
        values = event.feature_values(self.calibration.feature_names)
        if len(values) != self.calibration.n_features:
            raise InvalidEvent(
                f"wrong feature dimension: got {len(values)}, "
                f"stream {self.name!r} expects {self.calibration.n_features}"
            )
        return values

    def _ood_lists(
        self, event: PredictionEvent, kinds: tuple[str, ...]
    ) -> dict[str, list[float]]:
        """The event's logits / embedding the OOD rule reads, checked (:meth:`_ood_inputs`)."""
        inputs: dict[str, list[float]] = {}
        for kind in ("logits", "embedding"):
            value = getattr(event, kind)
            expected = getattr(self.calibration, kind)
            if value is None:
                if kind in kinds:
                    raise InvalidEvent(f"'{kind}' is missing; the stream's OOD scorers read it")
                continue
            if expected is None or len(value) != expected.shape[1]:
                width = None if expected is None else expected.shape[1]
                raise InvalidEvent(f"'{kind}' has length {len(value)}, stream expects {width}")
            if kind in kinds:
                inputs[kind] = value
        return inputs

    def _prediction(self, event: PredictionEvent) -> float | tuple[float, ...]:
        n_classes = self.calibration.n_classes
        if n_classes is None:
            if not isinstance(event.prediction, float | int):
                raise InvalidEvent("regression stream expects a number in 'prediction'")
            return float(event.prediction)
        if not isinstance(event.prediction, list) or len(event.prediction) != n_classes:
            raise InvalidEvent(f"'prediction' must be a probability vector of length {n_classes}")
        if min(event.prediction) < 0 or abs(math.fsum(event.prediction) - 1.0) > 1e-3:
            raise InvalidEvent("'prediction' probabilities must be >= 0 and sum to 1")
        return tuple(event.prediction)

    def _scale(self, event: PredictionEvent) -> float | None:
        """The event's predicted scale when the stream's score reads it (else None)."""
        if self.config.conditional_score not in SCALED_RESIDUALS:
            return None
        if event.scale is None:
            raise InvalidEvent(
                f"'scale' is missing; stream {self.name!r} scores residuals with "
                f"{self.config.conditional_score!r}, which divides by it"
            )
        return event.scale

    def _check_label(self, label: Any) -> None:
        n_classes = self.calibration.n_classes
        if n_classes is None:
            if isinstance(label, str | bool):
                raise InvalidEvent("regression stream expects a numeric 'label'")
        elif not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < n_classes:
            raise InvalidEvent(f"'label' must be a class index in [0, {n_classes})")


def check_calibration(config: StreamConfig, calibration: Calibration) -> None:
    """Refuse calibration data that does not fit the stream's task and score."""
    if config.task == "classification" and calibration.n_classes is None:
        raise CalibrationError("classification calibration needs probability-vector predictions")
    if config.task == "regression" and calibration.n_classes is not None:
        raise CalibrationError("regression calibration needs numeric predictions")
    if config.classes is not None and len(config.classes) != calibration.n_classes:
        raise CalibrationError(f"classes: {len(config.classes)} classes, but the calibration's "
                               f"probability vectors have {calibration.n_classes}")
    if config.conditional_score in SCALED_RESIDUALS and calibration.scales is None:
        raise CalibrationError(
            f"score {config.conditional_score!r} needs a 'scale' on every calibration row"
        )


def _listed(names: Sequence[str], most: int = 12) -> str:
    """Feature names for a message, the middle left out when there are many.

    >>> _listed(("a", "b"))
    'a, b'
    >>> _listed([f"x{j}" for j in range(30)], most=4)
    'x0, x1, …, x29 (30 features)'
    """
    if len(names) <= most:
        return ", ".join(names)
    return f"{', '.join(names[: most - 2])}, …, {names[-1]} ({len(names)} features)"
