"""The BH adjusted p-values equal scipy's ``false_discovery_control`` bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import false_discovery_control

from monitor.core.decisions.bh import bh_adjusted


@pytest.mark.parametrize("n", [0, 1, 2, 3, 17, 256, 1000])
def test_bh_adjusted_equals_scipy_bit_for_bit(n: int) -> None:
    rng = np.random.default_rng(n)
    for trial in range(20):
        p = rng.uniform(size=n) ** rng.uniform(0.2, 5.0)
        if trial % 2:  # conformal p-values j/(m+1): many exact ties
            p = rng.integers(1, 52, size=n) / 51.0
        if trial % 5 == 0 and n:
            p[rng.integers(0, n, size=max(1, n // 4))] = 1.0
        want = false_discovery_control(p, method="bh")
        got = bh_adjusted(p)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.tobytes() == want.tobytes()
