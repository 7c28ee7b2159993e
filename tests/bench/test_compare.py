"""bench_compare's shortcuts give exactly what the detectors give when run event by event."""

from __future__ import annotations

import doctest

import bench_compare as bc
import numpy as np
import pytest
from river import drift

from monitor.datasets import load_shuttle_regression
from monitor.detectors import ConditionalMonitor, CovariateMonitor
from monitor.detectors.pair import StreamDetectors

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
