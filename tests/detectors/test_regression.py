"""Regression tests: exact alarms of the default detectors on seeded Shuttle streams.

If a deliberate change of an algorithm moves these, re-pin them and say why in the commit.
"""

from __future__ import annotations

import numpy as np
import pytest

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.ops.datasets import DEMO_PHASES, load_shuttle_regression, make_stream
from monitor.streams.detectors import StreamDetectors

Alarm = tuple[str, str, int, int | None]


def _alarms(phases: list[tuple[str, int]], seed: int, covariate_threshold: float) -> list[Alarm]:
    s = make_stream(load_shuttle_regression(), phases, n_calibration=1000, seed=seed)
    cal_scores = np.abs(s.y_calibration - s.pred_calibration)
    scores = np.abs(s.y - s.pred)
    detectors = StreamDetectors(
        CovariateMonitor("knn", s.X_calibration, threshold=covariate_threshold, seed=seed),
        ConditionalMonitor(cal_scores, s.X_calibration, seed=seed),
    )
    latest: dict[tuple[str, int], Alarm] = {}  # each alarm's latest version (revisions replace)
    for t in range(len(s)):
        detectors.update(s.X[t], scores[t], event_index=t)
        for a in detectors.new_alarms:
            latest[a.detector, a.event_index] = (a.detector, a.kind, a.event_index, a.changepoint)
    return list(latest.values())


PINNED: dict[str, tuple[list[tuple[str, int]], float, list[Alarm]]] = {
    "concept": (
        [("stable", 500), ("concept", 700)],
        10_000.0,
        [("conditional", "concept_shift", 515, 508)],
    ),
    "extreme": (
        [("stable", 500), ("extreme_covariate", 700)],
        10_000.0,
        [
            ("conditional", "extreme_covariate_shift", 502, 500),
            ("covariate", "extreme_covariate_shift", 519, 507),
        ],
    ),
    "demo": (
        list(DEMO_PHASES),
        1_000.0,
        [
            ("covariate", "benign_covariate_shift", 845, 838),
            ("conditional", "concept_shift", 1647, 1621),
            ("conditional", "extreme_covariate_shift", 2202, 2201),
            ("covariate", "extreme_covariate_shift", 2212, 2212),
        ],
    ),
}


@pytest.mark.parametrize("name", list(PINNED))
def test_pinned_alarms(name: str) -> None:
    phases, covariate_threshold, expected = PINNED[name]
    assert _alarms(phases, 0, covariate_threshold) == expected
