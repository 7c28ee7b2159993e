"""The bounded weighted reference (``window``): what it keeps, exact restore, and validity.

The reference keeps the n_calibration + ``window`` most recent points (the calibration counts as
the oldest); the oldest leave at micro-batch boundaries. Validity is approximate (see
``docs/algorithms.md``, section 5): it is checked by a Monte Carlo test of Ville's bound with a
window far shorter than the stream.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.martingales import CompositeJumper, Ville
from monitor.core.martingales.density_ratio import OnlineDensityRatio
from monitor.core.martingales.weighted import WeightedConformalPValue
from monitor.streams.state import decode_state, encode_state


def _wcp(seed: int, window: int | None, n_cal: int = 100, batch: int = 8,
         grow: bool = True) -> tuple[WeightedConformalPValue, np.random.Generator]:
    rng = np.random.default_rng(seed)
    wcp = WeightedConformalPValue(
        np.abs(rng.normal(size=n_cal)), rng.normal(size=(n_cal, 2)),
        OnlineDensityRatio(2, seed=seed, learning_rate=0.05), batch_size=batch, seed=seed,
        grow_reference=grow, window=window,
    )
    return wcp, rng


def test_the_window_keeps_the_latest_points() -> None:
    """Each p-value lies between the weighted masses of the kept reference (the definition,
    TBCR 2019 eq. (7), recomputed from the kept points): p = (above + U·w_t) / total."""
    wcp, rng = _wcp(0, window=30)
    cal = list(zip(wcp.reference_scores, wcp.reference_features, strict=True))
    wcp.start_adaptation()
    stream: list[tuple[float, np.ndarray]] = []
    for t in range(400):
        s, x = float(abs(rng.normal(0.3 * (t > 200), 1.0))), rng.normal(0.5, 1.0, size=2)
        boundary = len(stream) - len(stream) % 8  # points merged at the last boundary
        merged_now = (cal + stream[:boundary])[-130:]  # calibration first, the oldest
        kept = merged_now + stream[boundary:]
        w = wcp.density_ratio.weights(np.array([k[1] for k in kept] + [x]))
        ks = np.array([k[0] for k in kept])
        total = w.sum()
        wcp.update(s, x)
        u = (wcp.p_value * total - w[:-1][ks > s].sum()) / w[-1]
        assert -1e-9 <= u <= 1 + 1e-9 or wcp.penalised
        stream.append((s, x))
        merged = len(stream) - len(stream) % 8
        assert wcp.n_reference == 100 + min(merged, 30) + (len(stream) - merged)
    assert wcp.n_evicted == 400 - 30


def test_restore_continues_bit_for_bit_after_evictions() -> None:
    wcp, rng = _wcp(1, window=25, batch=6)
    wcp.start_adaptation()
    for _ in range(203):  # mid-batch, after many evictions
        wcp.update(float(abs(rng.normal())), rng.normal(size=2))
    assert wcp.n_evicted > 100
    restored = WeightedConformalPValue.from_state(decode_state(*encode_state(wcp.state_dict())))
    for _ in range(100):
        s, x = float(abs(rng.normal())), rng.normal(size=2)
        wcp.update(s, x)
        restored.update(s, x)
        assert restored.p_value == wcp.p_value and restored.weights_ess == wcp.weights_ess
    assert restored.n_reference == wcp.n_reference == 100 + 25 + 303 % 6


def test_pre_adaptation_points_beyond_the_window_leave_when_adaptation_starts() -> None:
    wcp, rng = _wcp(2, window=40, grow=False)
    for _ in range(100):
        wcp.update(float(abs(rng.normal())), rng.normal(size=2))
    assert wcp.n_reference == 200
    wcp.start_adaptation()
    assert wcp.n_reference == 140 and wcp.n_evicted == 60


@pytest.mark.parametrize("window", [0, -1, 2.5, True])
def test_bad_window_is_rejected(window: object) -> None:
    with pytest.raises(ValueError, match="window must be None or a positive integer"):
        _wcp(0, window=window)  # type: ignore[arg-type]


def _ville_alarm(seed: int, window: int | None, n: int, shift: float = 0.0) -> bool:
    """Exchangeable stream (shift 0), adaptation at t = 0, Composite Jumper, Ville α = 0.1."""
    wcp, rng = _wcp(seed, window=window, batch=32)
    wcp.start_adaptation()
    jumper, rule = CompositeJumper(), Ville(alpha=0.1)
    for s, x in zip(np.abs(rng.normal(size=n)) + shift, rng.normal(size=(n, 2)), strict=True):
        wcp.update(float(s), x)
        jumper.update(wcp.p_value)
        rule.update(jumper.log_martingale)
        if rule.alarm:
            return True
    return False


def test_bounded_reference_keeps_villes_false_alarm_bound() -> None:
    """A window of 50 over 1 500 events (1 450 evicted, the calibration first): Ville alarm
    rate over 200 seeds ≤ α + 3 SE (docs/algorithms.md has the figures)."""
    runs, alpha = 200, 0.1
    rate = sum(_ville_alarm(seed, 50, 1500) for seed in range(runs)) / runs
    assert rate <= alpha + 3 * math.sqrt(alpha * (1 - alpha) / runs)


def test_bounded_reference_still_detects_a_concept_shift() -> None:
    assert sum(_ville_alarm(seed, 50, 400, shift=1.0) for seed in range(20)) >= 18
