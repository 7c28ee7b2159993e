"""Generic checks over every class of the statistical core (river-style contract suite)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from monitor.core.martingales import (
    CUSUM,
    AGrapaBetting,
    CompositeJumper,
    ConformalPValue,
    OnlineDensityRatio,
    PlugInPower,
    PowerBetting,
    ShiryaevRoberts,
    SimpleJumper,
    SimpleMixture,
    Ville,
    WeightedConformalPValue,
)

REF = np.random.default_rng(0).normal(size=101)
X_REF = np.random.default_rng(1).normal(size=(101, 2))


@dataclass
class Case:
    make: Callable[[], Any]
    step: Callable[[Any, np.random.Generator, int], None]  # one input, drawn from the rng
    observe: Callable[[Any], tuple[Any, ...]]
    bounded: bool  # memory O(1) in the stream length


def p_step(obj: Any, rng: np.random.Generator, t: int) -> None:
    obj.update(float(rng.uniform() ** (3.0 if t % 50 > 40 else 1.0)))


def score_step(obj: Any, rng: np.random.Generator, t: int) -> None:
    obj.update(float(np.round(rng.normal(), 1)))


def rule_step(obj: Any, rng: np.random.Generator, t: int) -> None:
    obj._test_walk = getattr(obj, "_test_walk", 0.0) + float(rng.normal(0.05, 1.0))
    obj.update(obj._test_walk)


def ratio_step(obj: OnlineDensityRatio, rng: np.random.Generator, t: int) -> None:
    x = rng.normal(size=2)
    if t % 3:
        obj.learn_target(x + 1.0)
    else:
        obj.learn_source(x)


def weighted_step(obj: WeightedConformalPValue, rng: np.random.Generator, t: int) -> None:
    if t == 30:
        obj.start_adaptation()
    obj.update(float(np.round(rng.normal(), 1)), rng.normal(size=2) + (t > 30))


def rule_obs(r: Any) -> tuple[Any, ...]:
    return (r.log_statistic, r.alarm, r.changepoint, r.n)


GRID = np.random.default_rng(2).normal(size=(5, 2))

CASES = {
    "ConformalPValue": Case(lambda: ConformalPValue(REF, seed=3), score_step,
                            lambda o: (o.p_value, o.n_reference), bounded=False),
    "ConformalPValue-bounded": Case(lambda: ConformalPValue(REF, seed=3, max_reference=16),
                                    score_step, lambda o: (o.p_value, o.n_reference), True),
    "SimpleJumper": Case(SimpleJumper, p_step, lambda o: (o.log_martingale,), True),
    "CompositeJumper": Case(CompositeJumper, p_step, lambda o: (o.log_martingale,), True),
    "PowerBetting": Case(PowerBetting, p_step, lambda o: (o.log_martingale,), True),
    "SimpleMixture": Case(SimpleMixture, p_step, lambda o: (o.log_martingale,), True),
    "AGrapaBetting": Case(AGrapaBetting, p_step, lambda o: (o.log_martingale,), True),
    "PlugInPower": Case(PlugInPower, p_step, lambda o: (o.log_martingale,), True),
    "Ville": Case(lambda: Ville(0.01), rule_step, rule_obs, True),
    "CUSUM": Case(lambda: CUSUM(100.0), rule_step, rule_obs, True),
    "ShiryaevRoberts": Case(lambda: ShiryaevRoberts(100.0), rule_step, rule_obs, True),
    "OnlineDensityRatio": Case(lambda: OnlineDensityRatio(2, seed=4, reservoir=50), ratio_step,
                               lambda o: tuple(o.weights(GRID).tolist()), True),
    "WeightedConformalPValue": Case(
        lambda: WeightedConformalPValue(REF, X_REF, OnlineDensityRatio(2, seed=5), batch_size=8,
                                        seed=6),
        weighted_step, lambda o: (o.p_value, o.penalised, o.weights_ess, o.n_reference), False),
}
IDS = list(CASES)


def drive(case: Case, obj: Any, n: int, seed: int, start: int = 0) -> list[tuple[Any, ...]]:
    rng = np.random.default_rng(seed)
    out = []
    for t in range(start, start + n):
        case.step(obj, rng, t)
        out.append(case.observe(obj))
    return out


def to_json(state: dict[str, Any]) -> str:
    """Strict JSON (no NaN/inf, as PostgreSQL JSONB requires); arrays become lists."""
    return json.dumps(state, default=lambda o: o.tolist(), allow_nan=False, sort_keys=True)


def n_numbers(value: Any) -> int:
    if isinstance(value, dict):
        return sum(n_numbers(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(n_numbers(v) for v in value)
    return 1


@pytest.mark.parametrize("name", IDS)
def test_clone_independence(name: str) -> None:
    case = CASES[name]
    a, b = case.make(), case.make()
    drive(case, a, 80, seed=1)
    assert to_json(b.state_dict()) == to_json(case.make().state_dict())


@pytest.mark.parametrize("name", IDS)
def test_state_round_trip_is_bit_for_bit(name: str) -> None:
    case = CASES[name]
    original = case.make()
    drive(case, original, 70, seed=2)
    restored = type(original).from_state(json.loads(to_json(original.state_dict())))
    if name in {"Ville", "CUSUM", "ShiryaevRoberts"}:  # the test's own walk is outside state
        restored._test_walk = original._test_walk
    assert drive(case, original, 60, seed=3, start=70) == drive(case, restored, 60, 3, start=70)
    assert to_json(original.state_dict()) == to_json(restored.state_dict())


@pytest.mark.parametrize("name", [n for n in IDS if CASES[n].bounded])
def test_memory_is_bounded(name: str) -> None:
    case = CASES[name]
    obj = case.make()
    sizes = []
    for k in range(4):
        drive(case, obj, 1000, seed=4 + k, start=1000 * k)
        sizes.append(n_numbers(json.loads(to_json(obj.state_dict()))))
    # constant, up to the block of pre-drawn tie-breaking uniforms (at most 256 numbers)
    assert max(sizes) - min(sizes) <= 256


@pytest.mark.parametrize("name", IDS)
def test_seeded_reproducibility(name: str) -> None:
    case = CASES[name]
    assert drive(case, case.make(), 100, seed=6) == drive(case, case.make(), 100, seed=6)


@pytest.mark.parametrize("name", IDS)
def test_state_of_another_class_is_rejected(name: str) -> None:
    from monitor.core.martingales import StateError

    obj = CASES[name].make()
    state = dict(obj.state_dict(), version=999)
    with pytest.raises(StateError, match="version"):
        type(obj).from_state(state)
    with pytest.raises(StateError, match="class"):
        type(obj).from_state(dict(obj.state_dict(), **{"class": "Other"}))
