"""Builds a stream's detectors and OOD decider from its configuration and calibration data."""

from __future__ import annotations

from typing import Any

import numpy as np

from monitor.calibration import Calibration
from monitor.config import StreamConfig
from monitor.decisions import OODDecider
from monitor.detectors.pair import StreamDetectors
from monitor.ood import make_scorer
from monitor.scores import PAIR_RESIDUALS, make_conditional_score


def calibration_scores(config: StreamConfig, calibration: Calibration) -> np.ndarray:
    """Conditional nonconformity scores of the calibration events."""
    score = make_conditional_score(config.conditional_score)
    labels = calibration.labels.astype(float if config.task == "regression" else int)
    return np.asarray(score(calibration.predictions, labels), dtype=np.float64)


def build_detectors(config: StreamConfig, calibration: Calibration) -> StreamDetectors:
    """Covariate + conditional monitors with diagnosis (docs/detectors.md)."""
    return StreamDetectors.from_config(
        config, calibration.features, calibration_scores(config, calibration)
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
        seed=config.seed,
    )
    labels = calibration.labels.astype(int) if config.task == "classification" else None
    return decider.fit(calibration.inputs(), labels)


def conditional_score(config: StreamConfig, prediction: Any, label: Any) -> float:
    """Nonconformity score of one joined (prediction, label) pair."""
    residual = PAIR_RESIDUALS.get(config.conditional_score)
    if residual is not None:  # regression
        return residual(float(prediction), float(label))
    score = make_conditional_score(config.conditional_score)  # classification
    return float(np.ravel(score(np.asarray(prediction, dtype=float), int(label)))[0])
