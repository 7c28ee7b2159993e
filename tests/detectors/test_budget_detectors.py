"""Alarm budgets as the stream's detectors are built from a configuration: an events budget
shared by the two detectors, a time budget's warm-up threshold, Ville's lifetime spending."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.core.martingales import Ville
from monitor.streams.config import StreamConfig
from monitor.streams.detectors import StreamDetectors


def detectors(alarm: dict[str, object]) -> StreamDetectors:
    rng = np.random.default_rng(0)
    config = StreamConfig(name="s", task="regression", calibration="c", alarm=alarm)
    return StreamDetectors.from_config(config, rng.normal(size=(200, 2)),
                                       np.abs(rng.normal(size=200)))


def at_two_per_second(pair: StreamDetectors) -> StreamDetectors:
    """300 updates at 2 events per second (event time)."""
    rng = np.random.default_rng(1)
    for t in range(300):
        pair.update(rng.normal(size=2), float(abs(rng.normal())), ts=1e9 + t / 2)
    return pair


def test_an_events_budget_gives_each_detector_twice_the_budget() -> None:
    pair = detectors({"rule": "cusum", "events": 3000})
    assert pair.covariate.threshold == pair.conditional.threshold == 6000.0
    assert pair.budgets == {}


def test_a_time_budget_warms_up_on_its_events_and_follows_event_times() -> None:
    pair = detectors({"false_alarm_every": "1h", "min_threshold": 2})  # the budget alone
    assert pair.covariate.threshold == pair.conditional.threshold == 2 * 50_000.0
    at_two_per_second(pair)
    assert pair.covariate.threshold == pair.conditional.threshold == 2 * 3600 * 2.0
    restored = StreamDetectors.from_state(pair.state_dict())
    assert restored.budgets["covariate"].state_dict() == pair.budgets["covariate"].state_dict()


def test_a_time_budget_holds_a_slow_stream_at_its_floor() -> None:
    """At 2 events/s a 1-hour budget alone gives 14 400; the default floor raises it to
    100 000 once the rate is measured (docs/detectors.md, "The threshold floor")."""
    pair = at_two_per_second(detectors({"false_alarm_every": "1h"}))
    assert pair.covariate.threshold == pair.conditional.threshold == 100_000.0
    assert pair.budgets["conditional"].rate == 2.0


def test_lifetime_spending_reaches_the_ville_rules() -> None:
    pair = detectors({"rule": "ville", "alpha": 0.01, "spending": "lifetime"})
    for monitor in (pair.covariate, pair.conditional):
        rule = monitor._test.rule
        assert isinstance(rule, Ville) and rule.spending == "lifetime"
        assert monitor.threshold == pytest.approx(np.pi**2 / 6 / 0.01)
    restored = StreamDetectors.from_state(pair.state_dict())
    assert restored.covariate._test.rule.spending == "lifetime"  # type: ignore[attr-defined]


def test_updates_without_event_times_run_on_the_event_count_threshold() -> None:
    """Events without ts (a notebook, a replay) are updates without an event time: each runs on
    max(min_threshold, 2·events), never on a rate measured from them."""
    pair = detectors({"false_alarm_every": "1h", "events": 400_000})
    rng = np.random.default_rng(2)
    for _ in range(600):
        pair.update(rng.normal(size=2), float(abs(rng.normal())))
    assert pair.covariate.threshold == pair.conditional.threshold == 2 * 400_000.0
    assert pair.budgets["covariate"].rate is None and pair.budgets["conditional"].rate is None
