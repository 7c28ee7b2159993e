"""The Simple Mixture's one-step path equals its vectorised closed form bit for bit."""

from __future__ import annotations

import numpy as np
from scipy.special import gammainc

from monitor.core.martingales.betting.mixture import log_mixture, log_mixture_one


def test_one_step_equals_the_vectorised_form_bit_for_bit() -> None:
    rng = np.random.default_rng(11)
    scales = rng.choice([1e-3, 0.1, 1.0, 10.0, 1e3], 3000)
    ns = np.concatenate([rng.integers(1, 5000, 4000), [1, 2, 10, 1e5, 1e6, 1e6, 1, 7]])
    lams = np.concatenate([rng.exponential(1.0, 3000) * scales, rng.uniform(0, 8000, 1000),
                           [0.0, 5e-324, 1e-300, 1e-10, 1e5, 2e6, 1e6, 0.0]])
    ns = ns.astype(np.float64)
    one = np.array([log_mixture_one(float(n), float(lam)) for n, lam in zip(ns, lams, strict=True)])
    vectorised = log_mixture(ns, lams)
    # The grid covers the closed form, its underflow (series) and lambda = 0.
    series = gammainc(ns + 1.0, np.where(lams > 0, lams, 1.0)) < 1e-280
    assert series.any() and (~series).any() and (lams == 0).any()
    assert one.tobytes() == vectorised.tobytes()
