"""Builds a stream's detectors and OOD decider from its configuration and calibration data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from monitor.core.decisions import OODDecider
from monitor.core.ood import make_scorer
from monitor.core.scores import (
    PAIR_RESIDUALS,
    SCALED_RESIDUALS,
    make_conditional_score,
    normalized_residual,
)
from monitor.streams.calibration import Calibration, CalibrationError
from monitor.streams.config import StreamConfig
from monitor.streams.detectors import StreamDetectors


def calibration_scores(config: StreamConfig, calibration: Calibration) -> np.ndarray:
    """Conditional nonconformity scores of the calibration events."""
    if config.conditional_score in SCALED_RESIDUALS:
        if calibration.scales is None:
            raise CalibrationError(
                f"score {config.conditional_score!r} needs a 'scale' on every calibration row"
            )
        return normalized_residual(
            calibration.labels.astype(float), calibration.predictions, calibration.scales
        )
    score = make_conditional_score(config.conditional_score)
    labels = calibration.labels.astype(float if config.task == "regression" else int)
    return np.asarray(score(calibration.predictions, labels), dtype=np.float64)


def build_detectors(config: StreamConfig, calibration: Calibration) -> StreamDetectors:
    """Covariate + conditional monitors with diagnosis (docs/detectors.md), on the schema's
    embedding of the calibration features (the features themselves for a plain schema)."""
    return StreamDetectors.from_config(
        config, calibration.encoded, calibration_scores(config, calibration),
        mixed=not calibration.schema.is_plain,
        outside_columns=calibration.schema.unseen_columns,
        ratio_columns=None if calibration.schema.is_plain
        else calibration.schema.numeric_columns,
    )


def build_ood(config: StreamConfig, calibration: Calibration) -> OODDecider | None:
    """The stream's OOD decision rule fitted on its calibration inputs, or None if disabled."""
    if not config.ood.enabled:
        return None
    decider = OODDecider(
        rule=config.ood.rule,
        alpha=config.ood.alpha,
        window=config.ood.window,
        scorers=[make_scorer(name) for name in config.ood.scorers],
        splits=config.ood.splits,
        conformal=config.ood.conformal,
        bank=config.reference_bank,
        seed=config.seed,
    )
    labels = calibration.labels.astype(int) if config.task == "classification" else None
    return decider.fit(calibration.inputs(), labels)


#: The nonconformity score of one joined pair: ``(prediction, label, scale) -> score``.
PairScore = Callable[[Any, Any, "float | None"], float]


def conditional_score(
    config: StreamConfig, prediction: Any, label: Any, scale: float | None = None
) -> float:
    """Nonconformity score of one joined (prediction, label) pair; ``scale`` is the event's
    predicted scale (checked present on arrival when the score reads it)."""
    return pair_score(config)(prediction, label, scale)


def pair_score(config: StreamConfig) -> PairScore:
    """:func:`conditional_score` of the stream ``config`` as a function of one pair, its score
    looked up once (a batch scores each of its joined pairs with it)."""
    scaled = SCALED_RESIDUALS.get(config.conditional_score)
    if scaled is not None:
        def scaled_score(prediction: Any, label: Any, scale: float | None) -> float:
            assert scale is not None, "a prediction without 'scale' is refused on arrival"
            return scaled(float(prediction), float(label), scale)
        return scaled_score
    residual = PAIR_RESIDUALS.get(config.conditional_score)
    if residual is not None:  # regression
        return lambda prediction, label, scale: residual(float(prediction), float(label))
    score = make_conditional_score(config.conditional_score)  # classification
    return lambda prediction, label, scale: float(
        np.ravel(score(np.asarray(prediction, dtype=float), int(label)))[0])
