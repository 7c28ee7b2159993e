"""bench_benign_weights: its estimated p-values are the service's, its oracle is the true tilt,
and the oracle mixture weights give uniform p-values where plain ones are not."""

from __future__ import annotations

import doctest

import bench_benign_weights as bw
import bench_compare as bc
import numpy as np

from monitor.ops.datasets import _Shifts, load_shuttle_regression


def test_doctests() -> None:
    assert doctest.testmod(bw).failed == 0


def test_estimated_p_values_are_bench_compare_s() -> None:
    task = load_shuttle_regression()
    stream = bc.scenario_stream(task, "benign_covariate", 3, bc.QUICK)
    given = bc.betting_input(stream, True, bc.covariate_alarm(stream))
    ps, slopes = bw.estimated_run(stream, {}, bw.log_tilt_cal(stream, task), every=50)
    assert given.restart is None
    np.testing.assert_array_equal(ps, given.ps)
    assert slopes.size == stream.scores.size // 50


def test_oracle_log_tilt_is_the_generator_s() -> None:
    task, seed = load_shuttle_regression(), 7
    stream = bc.scenario_stream(task, "benign_covariate", seed, bc.QUICK)
    # make_stream's first draw is the permutation whose head is the calibration
    cal = np.random.default_rng(seed).permutation(task.y.shape[0])[: bc.QUICK.n_calibration]
    truth = _Shifts(task, cal, 1.0, 1.0).log_tilt
    np.testing.assert_allclose(bw.log_tilt_cal(stream, task), truth[cal], atol=1e-12)


def test_constant_weights_give_the_unweighted_p_values() -> None:
    rng = np.random.default_rng(0)
    cal, scores = rng.random(40), rng.random(30)
    plain = bw.weighted_p_values(cal, scores, lambda t: None, seed=1)
    const = bw.weighted_p_values(cal, scores, lambda t: np.full(41 + t, 3.0), seed=1)
    np.testing.assert_allclose(plain, const, rtol=1e-12)


def test_oracle_mixture_weights_are_uniform_on_a_tilt() -> None:
    """Monte Carlo: x ~ N(0, 1), score = |x|, tilt r(x) = exp(x − 1/2) (E_p[r] = 1, so
    q = N(1, 1)). After the change the plain p-values are far too small; the oracle mixture
    weights r/(a + b·r) keep them uniform: mean −log p over 300 × 60 post-change values is 1
    within 0.03 (4 SE of independent values, 1/√18 000 ≈ 0.0075; the mixture weights are
    exact up to O(1/n)), where the plain p-values give ≈ 1.5."""
    rng = np.random.default_rng(12345)
    m, n0, n1 = 100, 20, 60
    out: dict[str, list[float]] = {"oracle": [], "plain": []}
    for rep in range(300):
        x = np.concatenate([rng.normal(size=m + n0), rng.normal(1.0, 1.0, size=n1)])
        s = np.abs(x)
        for name, weights in (("oracle", bw.oracle_weights(x - 0.5, m, n0, True)),
                              ("plain", lambda t: None)):
            p = bw.weighted_p_values(s[:m], s[m:], weights, seed=rep)
            out[name].extend((-np.log(p[n0:])).tolist())
    assert abs(np.mean(out["oracle"]) - 1.0) < 0.03
    assert np.mean(out["plain"]) > 1.1
