"""The WCTM's p-values pinned on seeded streams.

``wctm_recorded.json`` was written by the implementation before the compiled density-ratio
kernel and the array reference (river ``learn_one`` per point, Python-list prefix sums), with

    python -m tests.martingales.test_weighted_regression

The current implementation must reproduce those p-values and penalty flags exactly, and must
load a state that the older implementation stored (layout 1) and continue identically.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.core.martingales import OnlineDensityRatio, WeightedConformalPValue

RECORDED = Path(__file__).with_name("wctm_recorded.json")


@dataclass(frozen=True)
class Scenario:
    n_cal: int
    d: int
    batch_size: int
    n_before: int  # updates before start_adaptation
    n_after: int
    grow: bool = True
    ties: bool = False  # scores rounded to 0.1
    shift: float = 0.3
    ood_after: int | None = None  # from this adapted update on, x ~ N(6, 0.2)
    constant_feature: bool = False  # last feature always 1.0 (zero variance)
    ratio: tuple[tuple[str, Any], ...] = ()
    penalty_alpha: float = 0.1


SCENARIOS = {
    "growing-d2-ties-reservoir": Scenario(
        200, 2, 8, 100, 350, ties=True, shift=1.0, ratio=(("reservoir", 150),)),
    "bench-d5": Scenario(1000, 5, 32, 0, 400),
    "fixed-d1-ood-l2": Scenario(
        300, 1, 16, 0, 330, grow=False, shift=1.0, ood_after=290,
        ratio=(("learning_rate", 0.05), ("l2", 0.01))),
    "batch1-constant-feature": Scenario(
        120, 3, 1, 20, 230, ties=True, constant_feature=True, ood_after=200,
        ratio=(("learning_rate", 0.1),), penalty_alpha=0.05),
}
STATE_AT = ("growing-d2-ties-reservoir", 300)  # update index at which an old state was stored


def inputs(sc: Scenario, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Calibration scores and features, then the stream's scores and features."""
    rng = np.random.default_rng(seed)
    n = sc.n_before + sc.n_after
    s_cal, x_cal = np.abs(rng.normal(size=sc.n_cal)), rng.normal(size=(sc.n_cal, sc.d))
    s, x = np.abs(rng.normal(size=n)), rng.normal(size=(n, sc.d))
    x[sc.n_before:] += sc.shift
    if sc.ood_after is not None:
        x[sc.n_before + sc.ood_after:] = rng.normal(6.0, 0.2, size=(n - sc.n_before
                                                                     - sc.ood_after, sc.d))
    if sc.ties:
        s_cal, s = s_cal.round(1), s.round(1)
    if sc.constant_feature:
        x_cal[:, -1], x[:, -1] = 1.0, 1.0
    return s_cal, x_cal, s, x


def build(sc: Scenario, seed: int) -> WeightedConformalPValue:
    s_cal, x_cal, _, _ = inputs(sc, seed)
    ratio = OnlineDensityRatio(sc.d, seed=seed + 1, **dict(sc.ratio))
    return WeightedConformalPValue(s_cal, x_cal, ratio, batch_size=sc.batch_size, seed=seed + 2,
                                   penalty_alpha=sc.penalty_alpha, grow_reference=sc.grow)


def drive(sc: Scenario, wcp: WeightedConformalPValue, seed: int, start: int = 0,
          stop: int | None = None) -> list[list[Any]]:
    """[p_value, penalised, weights_ess] after each update from ``start`` to ``stop``."""
    _, _, s, x = inputs(sc, seed)
    out: list[list[Any]] = []
    for t in range(start, s.size if stop is None else stop):
        if t == sc.n_before:
            wcp.start_adaptation()
        wcp.update(float(s[t]), x[t])
        out.append([wcp.p_value, wcp.penalised, wcp.weights_ess])
    return out


def to_json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=lambda o: o.tolist(), allow_nan=False))


def record() -> dict[str, Any]:
    runs = {name: [[p, pen, float(f"{ess:.12g}")] for p, pen, ess in drive(sc, build(sc, 7), 7)]
            for name, sc in SCENARIOS.items()}
    name, at = STATE_AT
    wcp = build(SCENARIOS[name], 7)
    drive(SCENARIOS[name], wcp, 7, stop=at)
    return {"runs": runs, "state": to_json(wcp.state_dict())}


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    with RECORDED.open() as fh:
        data: dict[str, Any] = json.load(fh)
    return data


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_p_values_equal_the_recorded_ones(name: str, recorded: dict[str, Any]) -> None:
    got = drive(SCENARIOS[name], build(SCENARIOS[name], 7), 7)
    want = recorded["runs"][name]
    assert [g[:2] for g in got] == [w[:2] for w in want]  # p-values and penalties: exact
    # the effective sample size is a diagnostic, recorded to 12 significant digits
    assert [g[2] for g in got] == pytest.approx([w[2] for w in want], rel=1e-11)


def test_a_stored_older_state_loads_and_continues(recorded: dict[str, Any]) -> None:
    name, at = STATE_AT
    wcp = WeightedConformalPValue.from_state(recorded["state"])
    got = drive(SCENARIOS[name], wcp, 7, start=at)
    assert [g[:2] for g in got] == [w[:2] for w in recorded["runs"][name][at:]]


def test_penalties_and_ties_are_exercised(recorded: dict[str, Any]) -> None:
    """The recorded streams cover the branches they are meant to pin."""
    runs = recorded["runs"]
    assert any(r[1] for r in runs["fixed-d1-ood-l2"])
    assert any(r[1] for r in runs["batch1-constant-feature"])
    assert all(0.0 <= r[0] <= 1.0 and math.isfinite(r[2]) for run in runs.values() for r in run)


if __name__ == "__main__":
    RECORDED.write_text(json.dumps(record(), allow_nan=False, separators=(",", ":")) + "\n")
