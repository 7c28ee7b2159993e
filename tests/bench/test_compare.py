"""bench_compare's shortcuts give exactly what the detectors give when run event by event."""

from __future__ import annotations

import doctest
from dataclasses import replace

import bench_compare as bc
import numpy as np
import pytest
from river import drift

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.core.scores import one_minus_prob
from monitor.ops.datasets import (
    ClassificationTask,
    load_banana_classification,
    load_shuttle_regression,
)
from monitor.streams.detectors import StreamDetectors

SETTINGS = [("ville", 0.05), ("cusum", 20.0), ("shiryaev_roberts", 50.0)]


def _stream(scenario: str, seed: int) -> bc.Stream:
    return bc.scenario_stream(load_shuttle_regression(), scenario, seed, bc.QUICK)


def _first_conditional(monitor: ConditionalMonitor, stream: bc.Stream) -> int | None:
    for t, s in enumerate(stream.scores.tolist()):
        monitor.update(None, s)
        if monitor.alarm:
            return t
    return None


@pytest.mark.parametrize("betting", bc.BETTINGS)
def test_ctm_first_alarms_equal_the_monitor_run_event_by_event(betting: str) -> None:
    stream = _stream("concept_abrupt", seed=1)
    fast = bc.martingale_first_alarms(bc.betting_input(stream, False), betting)
    hits = 0
    for rule, level in SETTINGS:
        monitor = ConditionalMonitor(stream.cal_scores, None, weighted=False, betting=betting,
                                     rule=rule, threshold=max(level, 2.0), alpha=min(level, 0.5),
                                     rebaseline=0, seed=stream.seed)
        expected = _first_conditional(monitor, stream)
        assert fast[bc.label(rule, level)] == expected
        hits += expected is not None
    assert hits > 0  # the comparison is not vacuous


def _first_wctm_alarm(stream: bc.Stream, betting: str, rule: str, level: float) -> int | None:
    detectors = StreamDetectors(
        CovariateMonitor("knn", stream.cal_X, rebaseline=0, seed=stream.seed),
        ConditionalMonitor(stream.cal_scores, stream.cal_X, betting=betting, rule=rule,
                           threshold=max(level, 2.0), alpha=min(level, 0.5), rebaseline=0,
                           seed=stream.seed),
    )
    for t, (x, s) in enumerate(zip(stream.X, stream.scores.tolist(), strict=True)):
        detectors.update(x, s, event_index=t)
        if any(a.detector == "conditional" for a in detectors.new_alarms):
            return t
    return None


@pytest.mark.parametrize("betting", ["composite_jumper", "power"])
def test_wctm_first_alarms_equal_stream_detectors(betting: str) -> None:
    stream = _stream("extreme_covariate", seed=0)
    adaptation = bc.covariate_alarm(stream)
    assert adaptation is not None  # start_adaptation is called mid-stream
    fast = bc.martingale_first_alarms(bc.betting_input(stream, True, adaptation), betting)
    for rule, level in [("ville", 0.01), ("shiryaev_roberts", 1000.0)]:
        expected = _first_wctm_alarm(stream, betting, rule, level)
        assert expected is not None
        assert fast[bc.label(rule, level)] == expected


def test_kswin_first_detections_equal_direct_runs() -> None:
    stream = _stream("concept_abrupt", seed=2)
    alphas = bc.RIVER_GRID["kswin"][1]
    derived = bc.kswin_first_alarms(stream, alphas)
    for alpha in alphas:
        detector = drift.KSWIN(alpha=alpha, seed=stream.seed)
        warmup = stream.cal_scores[-(detector.window_size - 1):].tolist()
        first = bc._first_detection(detector, warmup, stream.scores.tolist())
        assert derived[bc.label("alpha", alpha)] == first
    assert any(v is not None for v in derived.values())


def test_gradual_ramp_mixes_in_the_new_concept_linearly() -> None:
    n_before, ramp, n_after = 10, 40, 60
    new_share = np.zeros(ramp)
    for seed in range(400):
        rows = bc.gradual_rows(n_before, ramp, n_after, seed)
        assert rows.size == n_before + n_after and np.unique(rows).size == rows.size
        assert (rows[n_before + ramp:] >= n_before + ramp).all()  # only the new concept after
        new_share += rows[n_before:n_before + ramp] >= n_before + ramp
    expected = np.arange(1, ramp + 1) / (ramp + 1)
    first, last = new_share[:10].mean() / 400, new_share[-10:].mean() / 400
    # Bernoulli means of 4 000 draws each: 3 standard errors are below 0.025.
    assert abs(first - expected[:10].mean()) < 0.025
    assert abs(last - expected[-10:].mean()) < 0.025


def test_matched_settings_pick_the_fastest_quiet_setting() -> None:
    def stats(rate: float, delay: float | None) -> dict[str, dict[str, float | None]]:
        return {"stationary": {"alarm_rate": rate}, "shift": {"delay_mean_censored": delay}}

    table = {"fast_noisy": stats(0.2, 5.0), "quiet": stats(0.01, 50.0),
             "quieter": stats(0.0, 80.0), "never": stats(0.0, None)}
    summary = {sc: {"det": {k: v[key] for k, v in table.items()}}
               for sc, key in [("stationary", "stationary"), *((s, "shift")
                                                                for s in bc.HARMFUL_SCENARIOS)]}
    picked = bc.matched_settings({"summary": summary})["det"]
    assert picked == {"setting": "quiet", "alarm_rate": 0.01, "mean_delay": 50.0}


def test_doctests_of_the_bench_modules() -> None:
    import figures
    import harness

    for module in (bc, figures, harness):
        result = doctest.testmod(module)
        assert result.failed == 0, module.__name__


# ------------------------------------------------------------------------- classification
def _pool_rows(task: ClassificationTask, X: np.ndarray) -> np.ndarray:
    """Pool index of every row of ``X`` (the Banana pool has no repeated feature rows)."""
    index = {tuple(row): i for i, row in enumerate(task.X.tolist())}
    assert len(index) == task.y.size
    return np.array([index[tuple(row)] for row in X.tolist()])


def _cls_stream(scenario: str, seed: int) -> tuple[ClassificationTask, bc.Stream]:
    task = load_banana_classification()
    return task, bc.classification_stream(task, scenario, seed, bc.QUICK)


@pytest.mark.parametrize("seed", [0, 1])
def test_classification_stationary_stream_is_a_uniform_draw_with_true_labels(seed: int) -> None:
    task, stream = _cls_stream("stationary", seed)
    cal, rows = _pool_rows(task, stream.cal_X), _pool_rows(task, stream.X)
    assert stream.change is None and rows.size == bc.QUICK.n_stationary
    # Exchangeable by construction: distinct rows, none of them a calibration row, labels and
    # scores those of the pool (no shift applied).
    assert np.unique(np.concatenate([cal, rows])).size == cal.size + rows.size
    np.testing.assert_array_equal(stream.scores, one_minus_prob(task.proba[rows], task.y[rows]))
    np.testing.assert_array_equal(stream.cal_scores, one_minus_prob(task.proba[cal], task.y[cal]))


def test_classification_concept_shift_raises_the_error_rate_in_the_region_only() -> None:
    before, after = [], []
    for seed in range(3):
        task, stream = _cls_stream("concept_abrupt", seed)
        rows, change = _pool_rows(task, stream.X), stream.change
        assert change == bc.QUICK.n_before
        true_scores = one_minus_prob(task.proba[rows], task.y[rows])
        cut = np.median(stream.cal_X[:, task.column("x1")])
        outside = stream.X[:, task.column("x1")] < cut
        # p(y | x) unchanged before the change and outside the region after it
        np.testing.assert_array_equal(stream.scores[:change], true_scores[:change])
        np.testing.assert_array_equal(stream.scores[change:][outside[change:]],
                                      true_scores[change:][outside[change:]])
        wrong = stream.scores > 0.5  # binary: the model's class is not the label
        before.append(wrong[:change].mean())
        after.append(wrong[change:].mean())
    # The model errs on ~11 % of pool rows; with the labels of half the inputs replaced by
    # random labels of their region it errs on ~30 %.
    assert max(before) < 0.2
    assert min(after) > max(before) + 0.08
    assert np.mean(after) > 2 * np.mean(before)


def test_classification_gradual_and_benign_streams() -> None:
    task, gradual = _cls_stream("concept_gradual", 0)
    rows = _pool_rows(task, gradual.X)
    assert rows.size == bc.QUICK.n_before + bc.QUICK.n_after and np.unique(rows).size == rows.size
    wrong = gradual.scores > 0.5
    assert wrong[-bc.QUICK.n_after + bc.QUICK.ramp:].mean() > wrong[:bc.QUICK.n_before].mean()

    tilted_x2 = []
    for seed in range(3):
        task, benign = _cls_stream("benign_covariate", seed)
        rows, change = _pool_rows(task, benign.X), benign.change
        # real rows with their own labels: p(y | x) unchanged, only p(x) tilted towards large x2
        np.testing.assert_array_equal(benign.scores, one_minus_prob(task.proba[rows],
                                                                    task.y[rows]))
        x2 = benign.X[:, task.column("x2")]
        tilted_x2.append(x2[change:].mean() - x2[:change].mean())
    assert min(tilted_x2) > 0.2  # standardised x2: the tilt λ = 1 moves its mean up


def test_classification_scenarios_feed_river_the_same_scores() -> None:
    _, stream = _cls_stream("concept_abrupt", 0)
    out = bc.run_stream("concept_abrupt", 0, bc.QUICK, task="classification")
    assert set(out["first"]) >= {"adwin", "wctm/plug_in_power", "ctm/mixture"}
    expected = bc._first_detection(drift.ADWIN(delta=0.002), stream.cal_scores.tolist(),
                                   stream.scores.tolist())
    assert out["first"]["adwin"]["delta@0.002"] == expected
    fast = bc.martingale_first_alarms(bc.betting_input(stream, False), "plug_in_power")
    assert out["first"]["ctm/plug_in_power"] == fast
    with pytest.raises(ValueError, match="extreme"):
        bc.make_scenario_stream("classification", "extreme_covariate", 0, bc.QUICK)


def test_n_after_1500_benign_stream_is_bench_statistical_s() -> None:
    import bench_statistical as bs

    sizes = replace(bc.FULL, n_after=1500)
    stream = bc.scenario_stream(load_shuttle_regression(), "benign_covariate", 3, sizes)
    data, cal_scores, scores = bs._stream(3, bs.SCENARIOS["benign_covariate"])
    np.testing.assert_array_equal(stream.scores, scores)
    np.testing.assert_array_equal(stream.cal_scores, cal_scores)
    np.testing.assert_array_equal(stream.X, data.X)
    assert stream.change == data.change_points[0]


def test_variants_bet_with_their_parameters() -> None:
    stream = _stream("concept_abrupt", seed=1)
    given = bc.betting_input(stream, True)
    default = bc.martingale_first_alarms(given, "plug_in_power")
    assert bc.martingale_first_alarms(given, "plug_in_power", {"forgets": (0.02, 0.1, 0.3)}) \
        == default
    single = bc.martingale_first_alarms(given, "plug_in_power", {"forgets": (0.3,)},
                                        extra=bc.VARIANT_SETTINGS)
    assert single != default and set(single) - set(default) == {
        bc.label(rule, level) for rule, level in bc.VARIANT_SETTINGS}
    run = bc.run_stream("concept_abrupt", 1, bc.QUICK, variants=True)
    assert run["first"]["wctm/plug_in_power[0.3]"] == single
    assert set(run["first"]["ctm/plug_in_power"]) == set(default)  # extra SR only for WCTMs


def test_paired_rates_count_discordant_streams_and_sign_test() -> None:
    runs = [{"scenario": "b", "seed": i, "change": 10,
             "first": {"m": {"x": 12 if i < 2 else None}, "p": {"x": 15 if i < 8 else None}}}
            for i in range(20)]
    out = bc.paired_rates(runs, "b", ("m", "p", "x"))
    assert out is not None
    assert (out["a"]["rate"], out["b"]["rate"], out["a_only"], out["b_only"]) == (0.1, 0.4, 0, 6)
    assert out["sign_test_p"] == round(2 / 2**6, 4)  # two-sided exact sign test, 6 vs 0
    assert out["seeds_b"] == list(range(8))
    assert bc.paired_rates(runs, "absent") is None
