"""Monte Carlo checks of the data-quality monitor (monitor/core/quality.py, docs/tabular.md).

Streams: k = 10 indicators at a 5 % rate, calibration counts drawn afresh in every run (the
guarantee is marginal over the calibration: calibration and stream exchangeable).

- False alarms, against the proved bounds: Ville P(an alarm) ≤ α; CUSUM and SR P(an alarm
  within m events) ≤ m/A. Each is a rate test (tests/support/sizing.py): false failure ≤ 1e-3 at
  the bound, power ≥ 0.8 against twice the bound (Ville at 2α; CUSUM/SR with the threshold
  halved). The monitor is conservative (deterministic p-values, Bonferroni over indicators):
  measured 0–0.5 % against bounds of 10–25 %, so these tests guard the bound, and the
  definitional tests (tests/core/test_quality.py) are what break when a formula is changed.
- Power: a missing-rate jump 5 % → 25 % in one of the 10 indicators at event 500, SR at
  A = 10 000: an alarm after the jump naming that indicator first in ≥ 90 % of 60 seeds
  (measured 200/200 seeds; median delay 96.5 events, 10–90 %: 34–263; docs/tabular.md).
"""

from __future__ import annotations

import numpy as np
import pytest

from monitor.core.quality import DataQualityMonitor
from tests.support.sizing import rate_test

K, RATE, N_CAL = 10, 0.05, 500


def _run(seed: int, rule: str, threshold: float, alpha: float, horizon: int,
         jump_at: int | None = None) -> tuple[int, str] | None:
    rng = np.random.default_rng(seed)
    monitor = DataQualityMonitor(
        [(f"f{j}", "missing") for j in range(K)], np.full(K, N_CAL),
        rng.binomial(N_CAL, RATE, size=K), rule=rule, threshold=threshold, alpha=alpha,
        rebaseline=0,
    )
    rates = np.full((horizon, K), RATE)
    if jump_at is not None:
        rates[jump_at:, 3] = 0.25
    monitor.update_batch(rng.uniform(size=rates.shape) < rates)
    if not monitor.last_alarms:
        return None
    alarm = monitor.last_alarms[0]
    return alarm.event.index, alarm.indicators[0]["feature"]


@pytest.mark.parametrize(
    ("rule", "threshold", "alpha", "horizon", "bound"),
    [
        pytest.param("ville", 2.0, 0.1, 2000, 0.1, id="ville-alpha-0.1"),
        pytest.param("cusum", 1000.0, 0.1, 250, 0.25, id="cusum-250-of-1000"),
        pytest.param("shiryaev_roberts", 1000.0, 0.1, 250, 0.25, id="sr-250-of-1000"),
        pytest.param("shiryaev_roberts", 40.0, 0.1, 10, 0.25, id="sr-10-of-40"),
    ],
)
def test_stationary_false_alarms_within_the_proved_bound(
    rule: str, threshold: float, alpha: float, horizon: int, bound: float
) -> None:
    test = rate_test(200, bound=bound, violation=2 * bound)
    assert test.false_failure <= 1e-3 and test.power >= 0.8, test.describe()
    alarms = sum(_run(seed, rule, threshold, alpha, horizon) is not None for seed in range(200))
    assert test.passes(alarms), f"{alarms} false alarms; {test.describe()}"


def test_missing_rate_jump_is_alarmed_and_named() -> None:
    results = [_run(seed, "shiryaev_roberts", 10_000.0, 0.1, 1500, jump_at=500)
               for seed in range(1000, 1060)]
    named = [r for r in results if r is not None and r[0] >= 500 and r[1] == "f3"]
    assert len(named) >= 54, f"{len(named)}/60 alarms naming f3 after the jump"
    delay = float(np.median([r[0] - 500 for r in named]))
    assert delay <= 150, f"median delay {delay}"


def test_all_zero_indicators_never_alarm() -> None:
    """Deterministic (no randomness in the monitor, none in an all-zero stream): at SR's
    default threshold and far below it, 200 000 events raise no alarm."""
    for threshold in (10.0, 10_000.0):
        monitor = DataQualityMonitor([(f"f{j}", "missing") for j in range(K)],
                                     np.full(K, N_CAL), np.zeros(K, np.int64),
                                     threshold=threshold)
        for _ in range(100):
            monitor.update_batch(np.zeros((2000, K), bool))
        assert monitor.n_alarms == 0
