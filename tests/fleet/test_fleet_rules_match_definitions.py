"""The fleet rules' rejection sets equal the rules written out directly from their definitions.

e-d-BH (Dandapanthula & Ramdas 2025, as in the authors' public code; e-BH of Wang & Ramdas 2022):
at each time, with the values sorted decreasingly M_(1) ≥ … ≥ M_(K), declare the k* largest,
k* = max{k : k·M_(k)/K ≥ 1/α} (0 when no k qualifies). e-d-Bonferroni: declare every stream with
M^k ≥ K/α. Written here independently of monitor.core.fleet (a sort and a scan, in linear scale) and
compared on random fleets with ties, zeros (R = 0) and values near the bars.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.fleet import FleetDecider


def _e_d_bh_by_definition(m: np.ndarray, alpha: float) -> set[int]:
    k = len(m)
    order = sorted(range(k), key=lambda i: -m[i])
    k_star = max((j + 1 for j in range(k) if (j + 1) * m[order[j]] / k >= 1.0 / alpha), default=0)
    return set(order[:k_star])


def _e_d_bonferroni_by_definition(m: np.ndarray, alpha: float) -> set[int]:
    return {i for i in range(len(m)) if m[i] >= len(m) / alpha}


def _random_fleet(rng: np.random.Generator) -> tuple[np.ndarray, float]:
    k = int(rng.integers(1, 30))
    alpha = float(rng.choice([0.2, 0.05, 1e-3]))
    # log-uniform values spanning the bars 1/α … K/α, some repeated, some exactly 0
    m = np.exp(rng.uniform(-2.0, math.log(k / alpha) + 1.0, size=k))
    m[rng.random(k) < 0.15] = 0.0
    if k > 2:
        m[1] = m[0]  # a tie
    return m, alpha


def _rejected(m: np.ndarray, rule: str, alpha: float) -> set[int]:
    fleet = FleetDecider([f"s{i}" for i in range(len(m))], rule=rule, alpha=alpha)  # type: ignore[arg-type]
    with np.errstate(divide="ignore"):
        fleet.update_all(np.log(m))
    return {int(name[1:]) for name in fleet.decide().rejected}


@pytest.mark.parametrize(
    ("rule", "definition"),
    [("e_d_bh", _e_d_bh_by_definition), ("e_d_bonferroni", _e_d_bonferroni_by_definition)],
)
def test_rejection_set_equals_the_definition(rule: str, definition: object) -> None:
    rng = np.random.default_rng(20250107)
    n_nonempty = 0
    for _ in range(2000):
        m, alpha = _random_fleet(rng)
        expected = definition(m, alpha)  # type: ignore[operator]
        assert _rejected(m, rule, alpha) == expected, (m.tolist(), alpha)
        n_nonempty += bool(expected)
    assert 200 < n_nonempty < 1800  # the draws exercise both outcomes, not only one


def test_e_d_bh_declares_more_than_bonferroni_when_streams_move_together() -> None:
    # K = 10, α = 0.1: Bonferroni's bar is 100; five values of 25 clear e-BH's 10/(0.1·5) = 20
    m = np.array([25.0] * 5 + [1.0] * 5)
    assert _rejected(m, "e_d_bh", 0.1) == set(range(5))
    assert _rejected(m, "e_d_bonferroni", 0.1) == set()
