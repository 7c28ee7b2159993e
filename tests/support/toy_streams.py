"""Small seeded data for the detector tests: calibration and a stream shifting at a known index."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Toy:
    """Calibration and a stream whose inputs and scores shift at ``change``."""

    X_cal: np.ndarray
    scores_cal: np.ndarray
    X: np.ndarray
    scores: np.ndarray
    change: int


def make_toy(seed: int = 0, n_cal: int = 400, n: int = 900, change: int = 300) -> Toy:
    rng = np.random.default_rng(seed)
    X_cal = rng.normal(size=(n_cal, 3))
    X = rng.normal(size=(n, 3))
    X[change:, 0] += 5.0  # inputs leave the calibration support
    scores = np.abs(rng.normal(size=n))
    scores[change:] *= 4.0  # and the model fails there
    return Toy(X_cal, np.abs(rng.normal(size=n_cal)), X, scores, change)
