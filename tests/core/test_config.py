"""Stream configuration: defaults, validation and file loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.config import ConfigError, StreamConfig, load_stream_config


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
