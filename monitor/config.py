"""Stream configuration: the YAML/JSON a user writes (docs/detectors.md).

Every field but ``name``, ``task`` and ``calibration`` has a documented default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from monitor.durations import parse_duration

Task = Literal["regression", "classification"]
ConditionalScore = Literal["abs_residual", "signed_residual", "one_minus_prob"]
Betting = Literal["simple_jumper", "composite_jumper", "power", "mixture"]
RuleName = Literal["ville", "cusum", "shiryaev_roberts"]
OODRuleName = Literal["bh", "eg_bh", "lond"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"


class ConfigError(ValueError):
    """A stream configuration that cannot be used; the message says which field and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlarmConfig(_Strict):
    """When a martingale raises an alarm.

    ``ville``: alarm when S_t >= 1/alpha (false-alarm probability <= alpha over the whole stream).
    ``cusum`` / ``shiryaev_roberts``: alarm when the statistic reaches ``threshold``; the mean run
    length to a false alarm on a stationary stream is at least ``threshold`` events.
    """

    rule: RuleName = "shiryaev_roberts"
    threshold: Annotated[float, Field(gt=1.0)] = 10_000.0
    alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.01


class OODConfig(_Strict):
    """Per-event OOD flags with FDR control, over windows (``bh``, ``eg_bh``) or online (``lond``).

    ``conformal="full"`` ranks KNN scores against every calibration row (full conformal, the
    default, measured most powerful); ``"split"`` fits on half and calibrates on the other half
    (split conformal, whose FDR bound under BH is proved). See docs/ood.md.
    """

    enabled: bool = True
    rule: OODRuleName = "eg_bh"
    alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.1
    window: Annotated[int, Field(ge=1, le=100_000)] = 256
    scorers: tuple[str, ...] = ()
    splits: Annotated[int, Field(ge=1, le=64)] = 5
    conformal: Literal["full", "split"] = "full"


class LabelJoinConfig(_Strict):
    """Bounded store of predictions waiting for labels (and labels waiting for predictions)."""

    max_pending: Annotated[int, Field(ge=1)] = 100_000
    max_delay_seconds: Annotated[float, Field(gt=0)] = 7 * 24 * 3600.0


class PerformanceConfig(_Strict):
    """Model performance windows: labelled events per window (docs/explain.md)."""

    window: Annotated[int, Field(ge=10)] = 500


class AttributionConfig(_Strict):
    """Feature attribution of covariate alarms: post-alarm prediction events tested."""

    window: Annotated[int, Field(ge=20)] = 200


Duration = Annotated[float, BeforeValidator(parse_duration)]


class RetentionConfig(_Strict):
    """How long stored results are kept (``monitor db prune`` and the worker apply it).

    Each age is a duration (``90d``, ``12h``, seconds) or null to keep forever. Trace points,
    OOD windows and dead letters age on the stream's own event-time clock (the newest stored row
    of the kind), so a replay of old data is not pruned on arrival; acknowledged alarms age from
    their acknowledgement (wall clock). Unacknowledged alarms are never pruned, and the trace
    points within ``alarm_context`` events of a kept alarm (from its changepoint) are kept.
    """

    trace_points: Duration | None = 90 * 86400.0
    ood_windows: Duration | None = 90 * 86400.0
    dead_letters: Duration | None = 30 * 86400.0
    acknowledged_alarms: Duration | None = 365 * 86400.0
    alarm_context: Annotated[int, Field(ge=0)] = 1000


class StreamConfig(_Strict):
    """One monitored stream.

    Defaults: ``score`` is ``abs_residual`` for regression and ``one_minus_prob`` for
    classification; ``covariate_score`` is ``knn``; ``betting`` unset means the Composite Jumper
    for the covariate monitor and the one-sided Simple Mixture for the conditional monitor (set
    it to use one betting function for both); the alarm rule is Shiryaev–Roberts with threshold
    (ARL) 10 000; OOD decisions use eg-BH at alpha 0.1 over windows of 256 events.
    """

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    task: Task
    calibration: str | list[dict[str, Any]]
    score: ConditionalScore | None = None
    covariate_score: str = "knn"
    betting: Betting | None = None
    alarm: AlarmConfig = AlarmConfig()
    covariate_alarm: AlarmConfig | None = None
    ood: OODConfig = OODConfig()
    labels: LabelJoinConfig = LabelJoinConfig()
    retention: RetentionConfig = RetentionConfig()
    weighted: bool = True
    weight_batch: Annotated[int, Field(ge=1, le=64)] = 32
    rebaseline: Annotated[int, Field(ge=0)] = 300
    max_reference: Annotated[int | None, Field(ge=100)] = None
    trace_every: Annotated[int, Field(ge=1)] = 10
    performance: PerformanceConfig = PerformanceConfig()
    attribution: AttributionConfig = AttributionConfig()
    seed: int = 0
    last_layer: str | None = None

    @model_validator(mode="after")
    def _check(self) -> StreamConfig:
        if self.score is None:
            default = "abs_residual" if self.task == "regression" else "one_minus_prob"
            object.__setattr__(self, "score", default)
        if self.task == "classification" and self.score != "one_minus_prob":
            raise ValueError("classification streams use score 'one_minus_prob'")
        if self.task == "regression" and self.score == "one_minus_prob":
            raise ValueError("regression streams use score 'abs_residual' or 'signed_residual'")
        return self

    @property
    def conditional_score(self) -> str:
        assert self.score is not None
        return self.score


def load_stream_config(path: str | Path) -> StreamConfig:
    """Read a YAML or JSON stream configuration; a relative ``calibration`` path is resolved
    against the configuration file's folder."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read stream configuration {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} on line {line}): "
            "save it as UTF-8"
        ) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of configuration fields")
    cal = data.get("calibration")
    if isinstance(cal, str) and not Path(cal).is_absolute():
        data["calibration"] = str((path.parent / cal).resolve())
    try:
        return StreamConfig.model_validate(data)
    except ValueError as exc:
        raise ConfigError(f"invalid stream configuration {path}: {exc}") from exc
