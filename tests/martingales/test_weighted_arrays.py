"""The array reference of the WCTM: sorted merge, prefix sums, inputs, interpreted kernels."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import monitor.core.martingales._logistic as logistic_mod
import monitor.core.martingales._weighted_kernels as kernels_mod
import monitor.core.martingales.density_ratio as ratio_mod
import monitor.core.martingales.weighted as weighted_mod
from monitor.core.martingales import ConformalPValue, OnlineDensityRatio, WeightedConformalPValue


def stream(seed: int, n_cal: int, n: int, d: int = 2) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return (np.abs(rng.normal(size=n_cal)).round(1), rng.normal(size=(n_cal, d)),
            np.abs(rng.normal(size=n)).round(1), rng.normal(0.5, 1.0, size=(n, d)))


def state_json(obj: WeightedConformalPValue) -> str:
    return json.dumps(obj.state_dict(), default=lambda o: o.tolist(), sort_keys=True)


def test_sorted_reference_and_prefix_sums_after_many_merges() -> None:
    """Ties everywhere, capacity doubled several times: the merged order is the stable sort
    by (score, arrival) and the prefix sums are those of the current weights in that order."""
    s_cal, x_cal, s, x = stream(0, 10, 500)
    wcp = WeightedConformalPValue(s_cal, x_cal, OnlineDensityRatio(2, seed=0), batch_size=7,
                                  seed=0)
    wcp.start_adaptation()
    for score, row in zip(s, x, strict=True):
        wcp.update(score, row)
    n = wcp._n
    assert n == 10 + 497 and wcp.n_reference == 510  # three events pending
    scores, order = wcp._scores[:n], wcp._order[:n]
    np.testing.assert_array_equal(order, np.argsort(scores, kind="stable"))
    np.testing.assert_array_equal(wcp._ref[0, :n], scores[order])
    weights = wcp.density_ratio.weights(wcp._columns[:, :n].T)[order]
    np.testing.assert_array_equal(wcp._ref[1, : n + 1], np.concatenate([[0.0], np.cumsum(weights)]))


def test_huge_batch_never_refreshes_and_equals_the_unweighted_p_values() -> None:
    """Until the first refresh every weight is 1: with batch_size beyond the stream the
    p-values are ConformalPValue's (the micro-batch buffer grows on demand)."""
    s_cal, x_cal, s, x = stream(1, 100, 300)
    wcp = WeightedConformalPValue(s_cal, x_cal, OnlineDensityRatio(2, seed=1),
                                  batch_size=10**9, seed=4)
    plain = ConformalPValue(s_cal, seed=4)
    wcp.start_adaptation()
    for score, row in zip(s, x, strict=True):
        wcp.update(score, row)
        plain.update(score)
        assert wcp.p_value == plain.p_value
    assert wcp.n_reference == 400


@pytest.mark.parametrize("kind", ["list", "float32", "column", "2-d"])
def test_any_array_like_row_gives_the_same_p_values(kind: str) -> None:
    s_cal, x_cal, s, x = stream(2, 50, 60)
    x = x.astype(np.float32).astype(np.float64)  # exactly representable in float32
    wide = np.asfortranarray(x)  # its rows are strided views
    convert = {"list": lambda i: x[i].tolist(), "float32": lambda i: x[i].astype(np.float32),
               "column": lambda i: wide[i], "2-d": lambda i: x[i : i + 1]}[kind]
    runs: list[list[float]] = [[], []]
    for as_given in (False, True):
        wcp = WeightedConformalPValue(s_cal, x_cal, OnlineDensityRatio(2, seed=2),
                                      batch_size=8, seed=2)
        wcp.start_adaptation()
        for i, v in enumerate(s):
            wcp.update(v, convert(i) if as_given else x[i])
            runs[as_given].append(wcp.p_value)
    assert runs[0] == runs[1]


def test_invalid_features_are_rejected_before_any_change() -> None:
    s_cal, x_cal, s, x = stream(3, 50, 20)
    wcp = WeightedConformalPValue(s_cal, x_cal, OnlineDensityRatio(2, seed=3), batch_size=8,
                                  seed=3)
    wcp.start_adaptation()
    for score, row in zip(s[:5], x[:5], strict=True):
        wcp.update(score, row)
    before = state_json(wcp)
    for bad in ([np.nan, 0.0], [0.0, np.inf], [1.0, 2.0, 3.0]):
        with pytest.raises(ValueError, match="finite numbers"):
            wcp.update(0.5, bad)
    with pytest.raises(ValueError, match="NaN"):
        wcp.update(np.nan, x[5])
    assert state_json(wcp) == before


def interpreted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace every numba kernel by its Python original (what runs without numba)."""
    modules: tuple[ModuleType, ...] = (logistic_mod, kernels_mod, ratio_mod, weighted_mod)
    for module in modules:
        for name, value in list(vars(module).items()):
            if hasattr(value, "py_func"):
                monkeypatch.setattr(module, name, value.py_func)


def test_interpreted_kernels_equal_the_compiled_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    s_cal, x_cal, s, x = stream(4, 40, 120, d=3)

    def run() -> list[float]:
        wcp = WeightedConformalPValue(s_cal, x_cal, OnlineDensityRatio(3, seed=5, reservoir=30),
                                      batch_size=8, seed=5)
        out = []
        for t, (score, row) in enumerate(zip(s, x, strict=True)):
            if t == 20:
                wcp.start_adaptation()
            wcp.update(score, row)
            out.append(wcp.p_value)
        return [*out, wcp.weights_ess]

    compiled = run()
    interpreted(monkeypatch)
    assert run() == compiled


@pytest.mark.parametrize("adapt_at", [None, 12], ids=["before-adaptation", "mid-batch"])
@pytest.mark.parametrize("grow", [True, False], ids=["growing", "fixed"])
def test_state_round_trip_mid_batch(grow: bool, adapt_at: int | None) -> None:
    s_cal, x_cal, s, x = stream(5, 30, 60)
    wcp = WeightedConformalPValue(s_cal, x_cal, OnlineDensityRatio(2, seed=6), batch_size=8,
                                  seed=6, grow_reference=grow)

    def drive(obj: WeightedConformalPValue, start: int, stop: int) -> list[tuple[Any, ...]]:
        out = []
        for t in range(start, stop):
            if t == adapt_at:
                obj.start_adaptation()
            obj.update(s[t], x[t])
            out.append((obj.p_value, obj.penalised, obj.weights_ess, obj.n_reference))
        return out

    drive(wcp, 0, 23)  # with adaptation at 12: 11 adapted events, 3 pending
    restored = WeightedConformalPValue.from_state(json.loads(state_json(wcp)))
    assert state_json(restored) == state_json(wcp)
    assert drive(restored, 23, 60) == drive(wcp, 23, 60)
