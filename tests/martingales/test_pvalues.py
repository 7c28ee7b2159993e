"""Conformal p-values: online == batch, exact uniformity and independence, bounded mode."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from scipy import stats

from monitor.core.martingales import ConformalPValue, conformal_p_values

# A KS test p-value below this on a fixed seed means the p-values are not uniform.
KS_LEVEL = 1e-3


def online(scores: np.ndarray, reference: np.ndarray, seed: int, **kw: int) -> np.ndarray:
    cp = ConformalPValue(reference, seed=seed, **kw)
    out = []
    for s in scores:
        cp.update(float(s))
        out.append(cp.p_value)
    return np.array(out)


@pytest.mark.parametrize(
    ("n", "m", "levels"),
    [(0, 0, 0), (1, 0, 0), (40, 0, 3), (300, 25, 0), (500, 100, 5), (1000, 7, 2),
     (4000, 2500, 0), (4000, 2500, 3), (20_000, 0, 0), (20_000, 3000, 7)],
    ids=["empty", "single", "ties-no-ref", "continuous", "ties-with-ref", "heavy-ties",
         "block-splits", "ties-across-blocks", "merges-and-grows", "ties-through-merges"],
)
def test_online_equals_batch_exactly(n: int, m: int, levels: int) -> None:
    rng = np.random.default_rng(n + m)
    def draw(k: int) -> np.ndarray:
        return rng.integers(0, levels, k).astype(float) if levels else rng.normal(size=k)

    scores, reference = draw(n), draw(m)
    np.testing.assert_array_equal(
        online(scores, reference, seed=11), conformal_p_values(scores, reference, seed=11)
    )


def test_batch_uniforms_equal_single_draws() -> None:
    batch = np.random.default_rng(5).random(1000)
    rng = np.random.default_rng(5)
    np.testing.assert_array_equal(batch, [rng.random() for _ in range(1000)])


def test_infinite_scores_rank_and_nan_is_rejected() -> None:
    p = conformal_p_values([np.inf, -np.inf, 0.0], reference=[1.0, 2.0], seed=0)
    assert p[0] < 1 / 3 and p[1] > 2 / 4
    with pytest.raises(ValueError, match="NaN"):
        conformal_p_values([0.0, np.nan])
    with pytest.raises(ValueError, match="NaN"):
        ConformalPValue([0.0]).update(float("nan"))


def pooled_p_values(levels: int, **kw: int) -> np.ndarray:
    """p-values of 200 exchangeable streams (30 calibration + 150 test scores each)."""
    out = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        scores = rng.integers(0, levels, 180).astype(float) if levels else rng.normal(size=180)
        if kw:
            out.append(online(scores[30:], scores[:30], seed=seed, **kw))
        else:
            out.append(conformal_p_values(scores[30:], scores[:30], seed=seed))
    return np.array(out)


@pytest.mark.parametrize("levels", [0, 4], ids=["continuous", "four-values"])
def test_p_values_are_uniform_and_independent(levels: int) -> None:
    p = pooled_p_values(levels)
    assert stats.kstest(p.ravel(), "uniform").pvalue > KS_LEVEL
    # per position too: each p_t is exactly Unif(0, 1), whatever t
    assert stats.kstest(p[:, -1], "uniform").pvalue > KS_LEVEL
    lag1 = np.corrcoef(p[:, :-1].ravel(), p[:, 1:].ravel())[0, 1]
    assert abs(lag1) < 3 / np.sqrt(p[:, 1:].size)  # 3 standard errors of a null correlation


@pytest.mark.parametrize("levels", [0, 4], ids=["continuous", "four-values"])
def test_bounded_mode_is_exactly_valid(levels: int) -> None:
    p = pooled_p_values(levels, max_reference=8)
    assert stats.kstest(p.ravel(), "uniform").pvalue > KS_LEVEL
    lag1 = np.corrcoef(p[:, :-1].ravel(), p[:, 1:].ravel())[0, 1]
    assert abs(lag1) < 3 / np.sqrt(p[:, 1:].size)


def test_uniformity_check_can_fail() -> None:
    """The same KS harness rejects p-values of a shifted stream."""
    rng = np.random.default_rng(0)
    p = conformal_p_values(rng.normal(0.5, 1.0, 3000), reference=rng.normal(size=300), seed=0)
    assert stats.kstest(p, "uniform").pvalue < KS_LEVEL


def test_bounded_mode_memory_stays_bounded() -> None:
    rng = np.random.default_rng(0)
    cp = ConformalPValue(rng.normal(size=1000), seed=0, max_reference=64)
    before = len(cp.state_dict()["reference"]["counts"])
    for s in rng.normal(size=20_000):
        cp.update(float(s))
    assert len(cp.state_dict()["reference"]["counts"]) == before <= 64
    assert cp.n_reference == 500 + 20_000  # only the odd positions of the calibration count


def test_bounded_mode_needs_a_reference() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        ConformalPValue([], max_reference=16)
    with pytest.raises(ValueError, match="max_reference"):
        ConformalPValue([1.0, 2.0], max_reference=1)


def test_reset_rebaselines_and_keeps_the_uniform_stream() -> None:
    cp = ConformalPValue([0.0, 1.0], seed=4)
    cp.update(5.0)
    cp.reset([10.0, 20.0, 30.0])
    assert cp.n_reference == 3 and np.isnan(cp.p_value)
    cp.update(100.0)
    u2 = np.random.default_rng(4).random(2)[1]
    assert cp.p_value == u2 / 4


def test_pickle_mid_buffer_continues_exactly() -> None:
    rng = np.random.default_rng(12)
    scores, reference = rng.normal(size=3000), rng.normal(size=100)
    cp = ConformalPValue(reference, seed=5)
    for s in scores[:1234]:  # the insert buffer is part full, the large array has grown
        cp.update(float(s))
    clone = pickle.loads(pickle.dumps(cp))
    expected = conformal_p_values(scores, reference, seed=5)[1234:]
    np.testing.assert_array_equal(online_continue(clone, scores[1234:]), expected)
    np.testing.assert_array_equal(online_continue(cp, scores[1234:]), expected)


def online_continue(cp: ConformalPValue, scores: np.ndarray) -> np.ndarray:
    out = []
    for s in scores:
        cp.update(float(s))
        out.append(cp.p_value)
    return np.array(out)


def test_state_written_by_the_sorted_list_version_loads() -> None:
    """JSON state of ConformalPValue([0.3, -1.2, 2.5], seed=8) after updates 0.1 and 3.0, as
    the previous (SortedList) implementation wrote it; the layout is unchanged."""
    state = json.loads(json.dumps({
        "class": "ConformalPValue", "version": 1, "seed": 8, "max_reference": None,
        "rng": {"bit_generator": "PCG64", "state": "213288717995992578374435127885630895835",
                "inc": "60804517828637344299932890193562703917", "has_uint32": 0,
                "uinteger": 0},
        "uniforms": np.random.default_rng(8).random(256)[2:].tolist(),
        "p_value": 0.19745536866758512,
        "reference": {"scores": [-1.2, 0.1, 0.3, 2.5, 3.0]},
    }))
    scores = np.concatenate([[0.1, 3.0], np.random.default_rng(1).normal(size=600)])
    restored = ConformalPValue.from_state(state)
    assert restored.n_reference == 5 and restored.p_value == 0.19745536866758512
    np.testing.assert_array_equal(
        online_continue(restored, scores[2:]),
        conformal_p_values(scores, [0.3, -1.2, 2.5], seed=8)[2:],
    )
