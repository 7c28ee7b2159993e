"""FleetDecider: the three rules' bars, alarms raised once until reset, state round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.fleet import FLEET_RULES, FleetDecider
from monitor.core.martingales.state import StateError


def _decider(rule: str, values: list[float], alpha: float = 0.1) -> FleetDecider:
    fleet = FleetDecider([f"s{k}" for k in range(len(values))], rule=rule, alpha=alpha)  # type: ignore[arg-type]
    for k, v in enumerate(values):
        fleet.update(f"s{k}", math.log(v) if v > 0 else -math.inf)
    return fleet


def test_bonferroni_bar_is_k_over_alpha() -> None:
    # K = 4, alpha = 0.1: bar 40
    decision = _decider("e_d_bonferroni", [41.0, 39.0, 1.0, 0.0]).decide()
    assert decision.rejected == ("s0",)
    assert decision.log_threshold == pytest.approx(math.log(40.0))


def test_per_stream_bar_is_one_over_alpha() -> None:
    decision = _decider("per_stream", [41.0, 11.0, 9.0, 0.0]).decide()
    assert decision.rejected == ("s0", "s1")


def test_e_d_bh_step_up() -> None:
    # K = 4, alpha = 0.1: r = 2 needs the 2nd largest >= 4/(0.1*2) = 20; r = 3 needs >= 13.3
    decision = _decider("e_d_bh", [25.0, 21.0, 13.0, 0.0]).decide()
    assert decision.rejected == ("s0", "s1")
    assert decision.log_threshold == pytest.approx(math.log(20.0))
    # e-BH rejects more than Bonferroni (bar 40) and fewer than per-stream (bar 10)
    assert _decider("e_d_bh", [45.0, 15.0, 14.0, 0.0]).decide().rejected == ("s0", "s1", "s2")


def test_alarm_raised_once_until_reset() -> None:
    fleet = _decider("e_d_bonferroni", [100.0, 1.0])
    assert fleet.decide().admitted == ("s0",)
    assert fleet.decide().admitted == ()  # still rejected, already in alarm
    fleet.reset("s0")
    assert fleet.log_value("s0") == -math.inf
    fleet.update("s0", math.log(100.0))
    assert fleet.decide().admitted == ("s0",)


def test_state_round_trip_continues_identically() -> None:
    rng = np.random.default_rng(7)
    for rule in FLEET_RULES:
        a = FleetDecider(["a", "b", "c"], rule=rule, alpha=0.05)  # type: ignore[arg-type]
        for _ in range(5):
            for k in a.streams:
                a.update(k, float(rng.normal(2.0, 2.0)))
            a.decide()
        b = FleetDecider.from_state(a.state_dict())
        for _ in range(5):
            for k in a.streams:
                x = float(rng.normal(2.0, 2.0))
                a.update(k, x)
                b.update(k, x)
            assert a.decide() == b.decide()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"streams": []}, "at least one stream"),
        ({"streams": ["a", "a"]}, "unique"),
        ({"streams": ["a"], "rule": "holm"}, "e_d_bh, e_d_bonferroni, per_stream"),
        ({"streams": ["a"], "alpha": 1.5}, "alpha"),
    ],
    ids=["empty", "duplicate", "unknown-rule", "bad-alpha"],
)
def test_bad_arguments_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FleetDecider(**kwargs)


def test_bad_updates_are_refused() -> None:
    fleet = FleetDecider(["a"])
    with pytest.raises(ValueError, match="not in this fleet"):
        fleet.update("b", 0.0)
    with pytest.raises(ValueError, match="finite or -inf"):
        fleet.update("a", math.nan)
    with pytest.raises(StateError):
        FleetDecider.from_state({"class": "Other", "version": 1})


def test_update_all_equals_one_by_one() -> None:
    values = [3.0, -math.inf, 9.5, 1.0]
    a, b = (FleetDecider("abcd", rule="e_d_bh", alpha=0.01) for _ in range(2))
    a.update_all(values)
    for name, v in zip("abcd", values, strict=True):
        b.update(name, v)
    assert a.decide() == b.decide()
    with pytest.raises(ValueError, match="expected 4"):
        a.update_all([1.0])


def test_release_lets_a_stream_alarm_again_without_reset() -> None:
    fleet = _decider("per_stream", [100.0, 1.0])
    assert fleet.decide().admitted == ("s0",)
    assert fleet.in_alarm == ("s0",)
    fleet.release("s0")
    assert fleet.log_value("s0") == math.log(100.0)  # the value is kept, only the flag clears
    assert fleet.decide().admitted == ("s0",)
