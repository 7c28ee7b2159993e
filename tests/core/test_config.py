"""Stream configuration: defaults, validation and file loading."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from monitor.streams.config import ConfigError, StreamConfig, load_stream_config


def test_defaults_depend_on_task() -> None:
    reg = StreamConfig(name="bikes", task="regression", calibration="cal.jsonl")
    cls = StreamConfig(name="digits", task="classification", calibration="cal.jsonl")
    assert reg.conditional_score == "abs_residual" and cls.conditional_score == "one_minus_prob"
    assert reg.betting is None and reg.alarm.rule == "shiryaev_roberts"
    assert reg.ood.rule == "eg_bh" and reg.ood.window == 256


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"task": "ranking"}, id="task"),
        pytest.param({"betting": "martingale"}, id="betting"),
        pytest.param({"alarm": {"rule": "ville", "alpha": 2}}, id="alpha"),
        pytest.param({"score": "one_minus_prob"}, id="score-task-mismatch"),
        pytest.param({"name": "../etc"}, id="name"),
        pytest.param({"unknown": 1}, id="extra-field"),
    ],
)
def test_invalid_configuration_is_rejected(changes: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        StreamConfig.model_validate(
            {"name": "bikes", "task": "regression", "calibration": "c", **changes}
        )


def test_load_resolves_calibration_relative_to_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: s\ntask: regression\ncalibration: cal.jsonl\nalarm: {rule: ville, alpha: 0.05}\n"
    )
    config = load_stream_config(path)
    assert config.calibration == str(tmp_path / "cal.jsonl")
    assert config.alarm.alpha == 0.05


def test_load_reports_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_stream_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid"):
        load_stream_config(bad)


def test_stored_and_reloaded_configuration_builds_the_same_detectors() -> None:
    """A configuration round-tripped through the database (model_dump → validate) must mean the
    same thing: defaults may not depend on which fields were set explicitly."""
    config = StreamConfig(name="s", task="regression", calibration="c")
    again = StreamConfig.model_validate(config.model_dump(mode="json"))
    assert again == config and again.betting is None


@pytest.mark.parametrize(
    ("alarm", "message"),
    [
        pytest.param({"threshold": 100, "false_alarm_every": "7d"}, "one of", id="two-levels"),
        pytest.param({"threshold": 100, "events": 10}, "one of", id="threshold-and-events"),
        pytest.param({"rule": "ville", "false_alarm_every": "7d"}, "ville", id="ville-budget"),
        pytest.param({"spending": "lifetime"}, "spending", id="spending-not-ville"),
        pytest.param({"false_alarm_every": "30x"}, "unit", id="unknown-unit"),
        pytest.param({"false_alarm_every": "0d"}, "positive", id="zero-budget"),
        pytest.param({"events": 0}, "events", id="zero-events"),
    ],
)
def test_bad_alarm_budgets_are_rejected_with_the_reason(
    alarm: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        StreamConfig.model_validate(
            {"name": "s", "task": "regression", "calibration": "c", "alarm": alarm}
        )


def test_budgets_round_trip_and_state_their_threshold() -> None:
    config = StreamConfig(name="s", task="regression", calibration="c",
                          alarm={"rule": "cusum", "false_alarm_every": "30d"},
                          covariate_alarm={"events": 5000})
    again = StreamConfig.model_validate(config.model_dump(mode="json"))
    assert again == config
    assert config.alarm.budget_seconds == 30 * 86400.0 and config.alarm.threshold is None
    assert config.alarm.fixed_threshold is None  # it follows the event rate
    assert config.covariate_alarm is not None
    assert config.covariate_alarm.fixed_threshold == 10_000.0  # shared by two detectors
    default = StreamConfig(name="s", task="regression", calibration="c")
    assert default.alarm.threshold is None and default.alarm.budget_seconds == 7 * 86400.0
    assert default.covariate_alarm is None  # the same budget for the covariate detector
    ville = StreamConfig(name="s", task="regression", calibration="c",
                         alarm={"rule": "ville", "alpha": 0.01, "spending": "lifetime"})
    assert ville.alarm.fixed_threshold is None


def test_a_time_budget_has_an_event_count_part() -> None:
    """``events`` beside ``false_alarm_every`` is the budget's event-count part N (warm-up and
    events without ts): filled in as 50 000, stored, kept when given, and carried into the
    detectors' budgets as the threshold max(min_threshold, 2·N) they start with."""
    from monitor.streams.detectors import _first_threshold, _time_budget

    base = {"name": "s", "task": "regression", "calibration": "c"}
    default = StreamConfig(**base)
    assert default.alarm.events == 50_000 and default.alarm.fixed_threshold is None
    assert default.model_dump(mode="json")["alarm"]["events"] == 50_000  # stored
    before = default.model_dump(mode="json")  # as a release without the field stored it
    del before["alarm"]["events"]
    assert StreamConfig.model_validate(before) == default  # the same configuration
    assert _first_threshold(default.alarm) == 100_000.0 == _time_budget(default.alarm).threshold
    given = StreamConfig(**base, alarm={"false_alarm_every": "30d", "events": 1_000_000})
    assert StreamConfig.model_validate(given.model_dump(mode="json")) == given
    assert given.alarm.fixed_threshold is None  # still a time budget
    assert _time_budget(given.alarm).event_threshold == 2_000_000.0
    assert StreamConfig(**base, alarm={"events": 10}).alarm.false_alarm_every is None


def test_a_time_budget_has_a_threshold_floor() -> None:
    """``min_threshold`` (docs/detectors.md, "The threshold floor"): filled in as 100 000 for a
    time budget, kept when given, refused without one (a threshold or an events budget states
    its level), and carried into the detectors' rate-following threshold."""
    base = {"name": "s", "task": "regression", "calibration": "c"}
    default = StreamConfig(**base)
    assert default.alarm.min_threshold == 100_000.0
    assert default.model_dump(mode="json")["alarm"]["min_threshold"] == 100_000.0  # stored
    assert StreamConfig(**base, alarm={"false_alarm_every": "1d", "min_threshold": 2}
                        ).alarm.min_threshold == 2.0
    assert StreamConfig(**base, alarm={"threshold": 500}).alarm.min_threshold is None
    for alarm in ({"threshold": 500, "min_threshold": 1000}, {"events": 10, "min_threshold": 1000},
                  {"rule": "ville", "alpha": 0.01, "min_threshold": 1000}):
        with pytest.raises(ValueError, match="min_threshold is the floor of a false_alarm_every"):
            StreamConfig(**base, alarm=alarm)
    for bad in (1.5, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="min_threshold"):
            StreamConfig(**base, alarm={"false_alarm_every": "1d", "min_threshold": bad})
    from monitor.streams.detectors import _time_budget

    assert default.alarm.budget_seconds is not None
    budget = _time_budget(default.alarm)
    assert budget.floor == 100_000.0
    # 7 days at 0.01 events/s would be 12 096; the floor sets 100 000 once the rate is known.
    assert budget.thresholds(np.arange(512) * 100.0)[-1] == 100_000.0


def test_the_attribution_window_exceeds_the_diagnosis_minimum() -> None:
    from monitor.streams.config import StreamConfig

    base = {"name": "s", "task": "regression", "calibration": "cal.jsonl"}
    StreamConfig.model_validate({**base, "attribution": {"window": 50},
                                 "diagnosis": {"min_events": 49}})
    with pytest.raises(ValueError, match=r"attribution.window \(50\) must exceed"):
        StreamConfig.model_validate({**base, "attribution": {"window": 50},
                                     "diagnosis": {"min_events": 50}})
