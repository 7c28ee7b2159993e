from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.detectors import AlarmEvent, ConditionalMonitor, CovariateMonitor
from monitor.core.diagnosis import DIAGNOSIS_KINDS, diagnose_conditional, diagnose_covariate
from monitor.streams.config import StreamConfig
from monitor.streams.detector_diagnosis import evidence_share
from monitor.streams.detectors import DetectorAlarm, StreamDetectors
from monitor.streams.records import ALARM_KINDS, DETECTORS, KINDS_OF_DETECTOR
from tests.support.toy_streams import Toy, make_toy


def test_every_diagnosed_kind_is_an_alarm_kind() -> None:
    assert set(DIAGNOSIS_KINDS) <= set(ALARM_KINDS)
    diagnosed = {*KINDS_OF_DETECTOR["covariate"], *KINDS_OF_DETECTOR["conditional"]}
    assert diagnosed == set(DIAGNOSIS_KINDS)
    assert tuple(KINDS_OF_DETECTOR) == DETECTORS
    assert {k for kinds in KINDS_OF_DETECTOR.values() for k in kinds} == set(ALARM_KINDS)


@pytest.mark.parametrize(
    ("share", "kind"),
    [
        (0.5, "extreme_covariate_shift"),
        (0.49, "benign_covariate_shift"),
        (math.nan, "benign_covariate_shift"),
    ],
)
def test_diagnose_covariate(share: float, kind: str) -> None:
    assert diagnose_covariate(share) == kind


@pytest.mark.parametrize(
    ("penalised", "outside", "kind"),
    [
        (0.6, 0.0, "extreme_covariate_shift"),
        (0.0, 0.7, "extreme_covariate_shift"),
        (0.1, 0.1, "concept_shift"),
        (math.nan, math.nan, "concept_shift"),
    ],
)
def test_diagnose_conditional(penalised: float, outside: float, kind: str) -> None:
    assert diagnose_conditional(penalised, outside) == kind


def test_evidence_share_scans_recent_windows() -> None:
    flags = np.zeros(400, bool)
    flags[390:] = True  # an abrupt move out of support 10 events before the alarm

    def share(start: int, stop: int) -> float:
        return float(flags[max(start, 0) : stop + 1].mean())

    early_cp = AlarmEvent(399, 50, 10.0, 9.0, 5.0)
    assert share(50, 399) < 0.05
    assert evidence_share(share, early_cp) == 1.0  # the last 5..10 events are all outside
    flags[395:] = False  # back inside: at most 5 of the last 10
    assert evidence_share(share, early_cp) == pytest.approx(5 / 10)


def test_evidence_window_starts_at_the_changepoint_estimate() -> None:
    calls: list[tuple[int, int]] = []

    def share(start: int, stop: int) -> float:
        calls.append((start, stop))
        return 0.0

    evidence_share(share, AlarmEvent(399, 303, 10.0, 9.0, 5.0))
    assert calls[0] == (303, 399)  # then the trailing windows


def test_changepoints_of_abrupt_toy_shifts_are_near_the_change() -> None:
    """The first alarm of each detector after an abrupt extreme shift at event 300 (6 seeds):
    the estimates that open the diagnosis' evidence window are a median ≤ 5 events from it."""
    errors = []
    for seed in range(6):
        toy = make_toy(seed=seed)
        det, first = _detectors(toy), dict[str, int | None]()
        for t in range(toy.change + 100):
            det.update(toy.X[t], toy.scores[t], event_index=t)
            for a in det.new_alarms:
                if a.event_index >= toy.change:
                    first.setdefault(a.detector, a.changepoint)
        assert set(first) == {"covariate", "conditional"}
        errors += [abs(cp - toy.change) for cp in first.values() if cp is not None]
    assert len(errors) == 12 and np.median(errors) <= 5


def _detectors(toy: Toy, **kw: object) -> StreamDetectors:
    return StreamDetectors(
        CovariateMonitor("knn", toy.X_cal, threshold=1000.0),
        ConditionalMonitor(toy.scores_cal, toy.X_cal, threshold=1000.0),
        **kw,  # type: ignore[arg-type]
    )


def test_extreme_shift_alarms_are_diagnosed_extreme() -> None:
    toy = make_toy(seed=0)
    det = _detectors(toy)
    alarms: list[DetectorAlarm] = []
    for t in range(toy.change + 100):
        det.update(toy.X[t], toy.scores[t], event_index=1000 + t)
        alarms += det.new_alarms
    after = [a for a in alarms if a.event_index >= 1000 + toy.change]
    assert {a.detector for a in after} == {"covariate", "conditional"}
    # the latest version of each alarm (an alarm a few events after its changepoint is raised
    # as insufficient_evidence, then revised once min_events events complete the evidence)
    latest = {(a.detector, a.event_index): a for a in after}
    assert all(a.kind == "extreme_covariate_shift" for a in latest.values())
    assert all(a.kind in ("extreme_covariate_shift", "insufficient_evidence") for a in after)
    first = next(a for a in after if a.kind == "extreme_covariate_shift")
    assert first.changepoint is not None and 1000 <= first.changepoint <= first.event_index
    assert first.rule == "shiryaev_roberts" and first.threshold == pytest.approx(1000.0)
    assert first.statistic >= first.threshold
    assert set(first.evidence) >= {
        "covariate_statistic",
        "penalised_fraction",
        "weights_ess",
        "outside_support_fraction",
    }
    assert first.evidence["outside_support_fraction"] >= 0.5


def test_concept_shift_is_diagnosed_concept() -> None:
    toy = make_toy(seed=1)
    X = toy.X.copy()
    X[toy.change :, 0] -= 5.0  # no input shift: only the scores change
    det = _detectors(toy)
    alarms: list[DetectorAlarm] = []
    for t in range(len(X)):
        det.update(X[t], toy.scores[t])
        alarms += det.new_alarms
    conditional = [a for a in alarms if a.detector == "conditional"]
    # the first alarm's latest version (raised early, it may wait for its evidence first)
    first = [a for a in conditional if a.event_index == conditional[0].event_index]
    assert first and first[-1].kind == "concept_shift"
    assert not [a for a in alarms if a.detector == "covariate" and a.event_index < toy.change + 300]


def test_label_delay_maps_conditional_changepoints_to_event_indices() -> None:
    toy = make_toy(seed=2)
    det = _detectors(toy)
    delay, alarms = 25, list[DetectorAlarm]()
    for t in range(len(toy.X)):
        det.update_covariate(toy.X[t], event_index=t)
        alarms += det.new_alarms
        if t >= delay:  # the label of event t - delay arrives now
            det.update_conditional(toy.X[t - delay], toy.scores[t - delay], event_index=t - delay)
            alarms += det.new_alarms
    conditional = next(a for a in alarms if a.detector == "conditional")
    assert toy.change <= conditional.event_index < toy.change + 60
    assert (
        conditional.changepoint is not None and conditional.changepoint <= conditional.event_index
    )


def test_score_none_steps_only_the_covariate_monitor(toy: Toy) -> None:
    det = _detectors(toy)
    det.update(toy.X[0])
    assert det.covariate.n_seen == 1 and det.conditional.n_seen == 0


def test_new_alarms_only_hold_the_last_call() -> None:
    toy = make_toy(seed=0)
    det = _detectors(toy)
    for t in range(len(toy.X)):
        det.update(toy.X[t], toy.scores[t])
        if det.new_alarms:
            break
    det.update(toy.X[t + 1], toy.scores[t + 1])
    assert det.new_alarms == () or all(a.event_index == t + 1 for a in det.new_alarms)


def test_from_config_builds_both_monitors(toy: Toy) -> None:
    config = StreamConfig.model_validate(
        {
            "name": "s",
            "task": "regression",
            "calibration": "cal.jsonl",
            "alarm": {"rule": "cusum", "threshold": 500.0},
            "covariate_alarm": {"rule": "ville", "alpha": 0.05},
            "covariate_score": "mahalanobis",
            "weight_batch": 16,
            "rebaseline": 100,
            "seed": 3,
        }
    )
    det = StreamDetectors.from_config(config, toy.X_cal, toy.scores_cal)
    cov, cond = det.covariate, det.conditional
    assert (cov.scorer, cov.rule, cov.threshold, cov.betting) == (
        "mahalanobis",
        "ville",
        20.0,
        "composite_jumper",
    )
    assert (cond.rule, cond.threshold, cond.batch_size, cond.betting) == (
        "cusum",
        500.0,
        16,
        "plug_in_power",
    )
    assert cov.rebaseline == cond.rebaseline == 100 and cov.seed == cond.seed == 3
    explicit = StreamConfig.model_validate(
        {
            "name": "s",
            "task": "regression",
            "calibration": "c",
            "betting": "power",
            "weighted": False,
            "max_reference": 200,
        }
    )
    det = StreamDetectors.from_config(explicit, toy.X_cal, toy.scores_cal)
    assert det.covariate.betting == det.conditional.betting == "power"
    assert det.conditional.max_reference == det.covariate.max_reference == 200


def test_from_config_rejects_bounded_weighted(toy: Toy) -> None:
    config = StreamConfig.model_validate(
        {"name": "s", "task": "regression", "calibration": "c", "max_reference": 200}
    )
    with pytest.raises(ValueError, match="needs weighted: false"):
        StreamDetectors.from_config(config, toy.X_cal, toy.scores_cal)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"history": 0}, "history"),
        ({"outside_level": 0.0}, "outside_level"),
        ({"penalised_level": 2.0}, "penalised_level"),
    ],
)
def test_invalid_arguments(toy: Toy, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _detectors(toy, **kwargs)
    with pytest.raises(ValueError, match="CovariateMonitor"):
        StreamDetectors(None, None)  # type: ignore[arg-type]
