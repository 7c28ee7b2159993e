"""Stream configuration: the YAML/JSON a user writes (docs/detectors.md).

Every field but ``name``, ``task`` and ``calibration`` has a documented default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from monitor.core.martingales.alarms.budget import DEFAULT_EVENTS
from monitor.core.tabular import MAX_CATEGORIES, MAX_SEEN, category_text
from monitor.errors import MonitorError
from monitor.streams.durations import parse_duration

Task = Literal["regression", "classification"]
ConditionalScore = Literal[
    "abs_residual", "signed_residual", "normalized_residual", "one_minus_prob"
]
Betting = Literal[
    "simple_jumper", "composite_jumper", "power", "mixture", "agrapa", "plug_in_power"
]
RuleName = Literal["ville", "cusum", "shiryaev_roberts"]
OODRuleName = Literal["bh", "eg_bh", "lond"]
Spending = Literal["per_segment", "lifetime"]
FeatureKind = Literal["numeric", "categorical"]
QualityRate = Literal["missing", "unseen", "out_of_range"]
#: A category as written in a pinned vocabulary (a number or boolean stands for its text).
Category = StrictStr | StrictBool | StrictInt | StrictFloat

#: A cusum / shiryaev_roberts rule's budget when no threshold or budget is given: at most one
#: false alarm a week, P(a false alarm within t) <= t / 7 days, at any rate up to 100 000
#: events/s (docs/detectors.md, "Alarm budgets").
DEFAULT_BUDGET = 7 * 86_400.0
#: The lowest threshold a time budget sets (``alarm.min_threshold``), and the threshold of
#: ``monitor.watch`` (a notebook has no event times for a budget to follow). Chosen by
#: measurement (docs/detectors.md, "The threshold floor"): at 10⁵ the plug-in power bet raises
#: no more harmful alarms on a benign covariate shift, and no more false alarms, than the Simple
#: Mixture at the previous default of 10 000, and still detects harmful shifts sooner.
DEFAULT_THRESHOLD = 100_000.0

#: ``covariate_reference_limit`` by default: at most 20 000 exact scores (160 KB of a checkpoint)
#: per segment between alarms, then 1 000 bin counts; a stream's first 20 000 scores (the
#: calibration's reference half included) are monitored exactly as with no limit.
COVARIATE_REFERENCE_LIMIT = 20_000

#: ``reference_bank`` by default: the kNN covariate score and the full-conformal OOD p-values
#: read at most this many calibration rows, a seeded random subsample of them (chosen by
#: measurement, docs/ood.md "Reference bank": the cost per record at m = 8 000 1.05× that at
#: m = 1 000, where 2 000 gave 1.33×, for 1 to 2.4 points of OOD TPR); a calibration of at
#: most as many rows (OOD) or twice as many (the covariate score's half) is read whole, as
#: before.
REFERENCE_BANK = 1000
#: The detectors of a stream that share its alarm budget (covariate and conditional): each gets
#: BUDGET_SHARE times the budget, so the stream as a whole keeps it (docs/algorithms.md).
BUDGET_SHARE = 2

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$"

#: A duration as operators write it (``7d``, ``12h``, seconds: :mod:`monitor.streams.durations`),
#: stored in seconds.
Duration = Annotated[float, BeforeValidator(parse_duration)]


class ConfigError(MonitorError, ValueError):
    """A stream configuration that cannot be used; the message says which field and why."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AlarmConfig(_Strict):
    """When a martingale raises an alarm.

    ``ville``: alarm when S_t >= 1/alpha; ``spending`` says how alpha covers the restarts after
    alarms: ``per_segment`` (the default: P(false alarm) <= alpha for each segment between
    restarts) or ``lifetime`` (P(any false alarm over the stream's whole life) <= alpha, segment
    k using alpha·6/(π²k²)).
    ``cusum`` / ``shiryaev_roberts``: alarm when the statistic reaches a threshold, given as one
    of (at most one; none means ``false_alarm_every: 7d``):

    - ``false_alarm_every``: a budget in time (``30d``, ``1w``, ``12h``, or seconds): on a
      stream without change, P(a false alarm within t) <= t / budget for the stream as a whole;
      the threshold follows the stream's event rate measured on event time (docs/detectors.md);
    - ``events``: a budget in events: the stream's mean run length to a false alarm is at least
      ``events`` updates of each detector;
    - ``threshold``: the statistic's level itself (each detector's mean run length >= threshold).

    ``min_threshold`` (time budgets only; default 100 000) is the lowest threshold the budget
    sets: max(min_threshold, 2·T·r̂). It only makes the stream quieter than its budget, on slow
    streams; ``min_threshold: 2`` lets the budget alone decide.

    With ``false_alarm_every``, ``events`` (default 50 000) is the budget's event-count part N:
    a detector's first 256 updates (the rate's warm-up) and every update without an event time
    (an event without ``ts``) run on the threshold max(min_threshold, 2·N), so a stream keeps
    P(a false alarm within t) <= 256/N + t/budget (docs/algorithms.md).
    """

    rule: RuleName = "shiryaev_roberts"
    threshold: Annotated[float | None, Field(gt=1.0)] = None
    false_alarm_every: Duration | None = None
    events: Annotated[int | None, Field(ge=1)] = None
    min_threshold: Annotated[float | None, Field(ge=2.0, allow_inf_nan=False)] = None
    alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.01
    spending: Spending = "per_segment"

    @model_validator(mode="after")
    def _check(self) -> AlarmConfig:
        given = [k for k in ("threshold", "false_alarm_every", "events")
                 if getattr(self, k) is not None]
        if len(given) > 1 and given != ["false_alarm_every", "events"]:
            raise ValueError(
                f"alarm: give one of threshold, false_alarm_every, events (or "
                f"false_alarm_every with the events of its warm-up); got {given}"
            )
        if not given and self.rule != "ville":
            object.__setattr__(self, "false_alarm_every", DEFAULT_BUDGET)
        if self.rule == "ville" and (self.false_alarm_every is not None or self.events is not None):
            raise ValueError(
                "alarm: false_alarm_every / events budget a cusum or shiryaev_roberts rule; "
                "ville takes alpha (with spending)"
            )
        if self.false_alarm_every is None and self.min_threshold is not None:
            raise ValueError(
                "alarm: min_threshold is the floor of a false_alarm_every budget; with a "
                "threshold or an events budget, state the threshold itself"
            )
        if self.false_alarm_every is not None and self.min_threshold is None:
            object.__setattr__(self, "min_threshold", DEFAULT_THRESHOLD)
        if self.false_alarm_every is not None and self.events is None:
            object.__setattr__(self, "events", DEFAULT_EVENTS)
        if self.rule != "ville" and self.spending != "per_segment":
            raise ValueError("alarm: spending applies to the ville rule only")
        return self

    @property
    def fixed_threshold(self) -> float | None:
        """The threshold a detector under this rule alarms at, when it is fixed: ``threshold``,
        BUDGET_SHARE × ``events``, 1/alpha for ``ville`` with ``per_segment`` spending; None
        when it moves (a time budget follows the event rate; lifetime spending's 1/α_k)."""
        if self.rule == "ville":
            return 1.0 / self.alpha if self.spending == "per_segment" else None
        if self.false_alarm_every is not None:
            return None
        if self.events is not None:
            return float(BUDGET_SHARE * self.events)
        return self.threshold

    @property
    def event_threshold(self) -> float | None:
        """A time budget's event-count threshold max(min_threshold, BUDGET_SHARE × ``events``),
        in force during warm-up and for events without ``ts`` (None without a time budget)."""
        if self.false_alarm_every is None or self.events is None or self.min_threshold is None:
            return None
        return max(self.min_threshold, float(BUDGET_SHARE * self.events))

    @property
    def budget_seconds(self) -> float | None:
        """``false_alarm_every`` in seconds (None without a time budget)."""
        return self.false_alarm_every


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


class DataQualityConfig(_Strict):
    """The data-quality monitor (docs/tabular.md, "Data quality"): each feature's ``rates``
    (``missing`` for every feature, ``unseen`` for categorical, ``out_of_range`` — outside the
    calibration's range — for numeric ones; ``out_of_range`` is opt-in) tested against the
    calibration's, with a false-alarm budget of its own (``false_alarm_every``), so the
    covariate and conditional monitors' thresholds do not move."""

    enabled: bool = True
    false_alarm_every: Annotated[Duration, Field(gt=0)] = 30 * 86_400.0
    rates: tuple[QualityRate, ...] = ("missing", "unseen")

    @field_validator("rates")
    @classmethod
    def _rates(cls, rates: tuple[str, ...]) -> tuple[str, ...]:
        if not rates:
            raise ValueError("data_quality.rates: name at least one of missing, unseen, "
                             "out_of_range (or set enabled: false)")
        repeated = sorted({r for r in rates if rates.count(r) > 1})
        if repeated:
            raise ValueError(f"data_quality.rates: {repeated[0]!r} is given twice")
        return rates


class DiagnosisConfig(_Strict):
    """How much evidence an alarm's diagnosis needs (docs/detectors.md, "Diagnosis").

    ``min_events``: fewest events from the alarm's changepoint to the alarm from which a kind is
    decided; an alarm with fewer is raised as ``insufficient_evidence`` and revised once the
    next events complete its evidence.
    """

    min_events: Annotated[int, Field(ge=1, le=1_000)] = 10


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


class RetentionConfig(_Strict):
    """How long stored results are kept (``monitor db prune`` and the worker apply it).

    Each age is a duration (``90d``, ``12h``, seconds) or null to keep forever. Trace points, OOD
    windows and performance windows age on the stream's own event-time clock (the newest stored
    row of the kind), so a replay of old data is not pruned on arrival; dead letters age from
    when they were stored and acknowledged alarms from their acknowledgement (wall clock).
    Unacknowledged alarms are never pruned, and the trace points (and performance windows)
    within ``alarm_context`` events of a kept alarm (from its changepoint) are kept.
    """

    trace_points: Duration | None = 90 * 86400.0
    ood_windows: Duration | None = 90 * 86400.0
    performance_windows: Duration | None = 365 * 86400.0
    dead_letters: Duration | None = 30 * 86400.0
    acknowledged_alarms: Duration | None = 365 * 86400.0
    alarm_context: Annotated[int, Field(ge=0)] = 1000


class StreamConfig(_Strict):
    """One monitored stream.

    Defaults: ``score`` is ``abs_residual`` for regression and ``one_minus_prob`` for
    classification; ``covariate_score`` is ``knn``; ``betting`` unset means the Composite Jumper
    for the covariate monitor and the one-sided plug-in power for the conditional monitor (set
    it to use one betting function for both); the alarm rule is Shiryaev–Roberts with a budget of
    one false alarm a week (``false_alarm_every: 7d``, shared by the two detectors, the threshold
    following the event rate); OOD decisions use eg-BH at alpha 0.1 over windows of 256 events.
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
    diagnosis: DiagnosisConfig = DiagnosisConfig()
    weighted: bool = True
    weight_batch: Annotated[int, Field(ge=1, le=64)] = 32
    rebaseline: Annotated[int, Field(ge=0)] = 300
    max_reference: Annotated[int | None, Field(ge=100)] = None
    #: The covariate monitor's reference is exact up to this many scores, then bin counts
    #: (docs/algorithms.md, "Bounded reference after a limit"); weighted or not. None: every
    #: score until the next alarm. Unused with ``max_reference`` (quantized from the start).
    covariate_reference_limit: Annotated[int | None, Field(ge=1000)] = COVARIATE_REFERENCE_LIMIT
    #: At most this many calibration rows in the kNN covariate score's bank and the OOD
    #: p-values' (a seeded random subsample; docs/ood.md, "Reference bank"). None: all.
    reference_bank: Annotated[int | None, Field(ge=100)] = REFERENCE_BANK
    reference_window: Annotated[int | None, Field(ge=1)] = 5000
    trace_every: Annotated[int, Field(ge=1)] = 10
    performance: PerformanceConfig = PerformanceConfig()
    attribution: AttributionConfig = AttributionConfig()
    seed: int = 0
    last_layer: str | None = None
    features: dict[str, FeatureKind] | None = None
    vocabulary: dict[str, list[Category]] | None = None
    max_categories: Annotated[int, Field(ge=1, le=1_000)] = MAX_CATEGORIES
    data_quality: DataQualityConfig = DataQualityConfig()
    classes: list[Category] | None = None

    @model_validator(mode="after")
    def _check(self) -> StreamConfig:
        if self.score is None:
            default = "abs_residual" if self.task == "regression" else "one_minus_prob"
            object.__setattr__(self, "score", default)
        if self.task == "classification" and self.score != "one_minus_prob":
            raise ValueError("classification streams use score 'one_minus_prob'")
        if self.attribution.window <= self.diagnosis.min_events:
            # an attribution revises its alarm after its diagnosis did (docs/explain.md)
            raise ValueError(
                f"attribution.window ({self.attribution.window}) must exceed "
                f"diagnosis.min_events ({self.diagnosis.min_events})"
            )
        if self.task == "regression" and self.score == "one_minus_prob":
            raise ValueError(
                "regression streams use score 'abs_residual', 'signed_residual' or "
                "'normalized_residual'"
            )
        _check_declaration(self.features, self.vocabulary)
        _check_classes(self.task, self.classes)
        return self

    @property
    def schema_options(self) -> dict[str, Any]:
        """The feature schema's declaration, for :meth:`FeatureSchema.fit
        <monitor.streams.schema.FeatureSchema.fit>` (via ``Calibration.from_rows``)."""
        return {"kinds": self.features, "vocabulary": self.vocabulary,
                "max_categories": self.max_categories, "seed": self.seed}

    @property
    def conditional_score(self) -> str:
        assert self.score is not None
        return self.score


def _check_declaration(features: dict[str, FeatureKind] | None,
                       vocabulary: dict[str, list[Any]] | None) -> None:
    """A ``features:`` / ``vocabulary:`` declaration that can describe a schema."""
    if features is not None and not features:
        raise ValueError("features: declare at least one feature (name: numeric or "
                         "categorical), or leave it out to infer the kinds from the calibration")
    for name, categories in (vocabulary or {}).items():
        kind = (features or {}).get(name)
        if kind == "numeric":
            raise ValueError(f"vocabulary.{name}: feature {name!r} is declared numeric; a "
                             "vocabulary pins a categorical feature's categories")
        if not categories:
            raise ValueError(f"vocabulary.{name}: give at least one category")
        if len(categories) > MAX_SEEN:
            raise ValueError(f"vocabulary.{name}: at most {MAX_SEEN} categories, got "
                             f"{len(categories)}")
        texts = [category_text(c) for c in categories]
        repeated = next((t for k, t in enumerate(texts) if t in texts[:k]), None)
        if repeated is not None:
            raise ValueError(f"vocabulary.{name}: category {repeated!r} is given twice")


def _check_classes(task: str, classes: list[Any] | None) -> None:
    """``classes``: a classification stream's class names, each once, at least two."""
    if classes is None:
        return
    if task != "classification":
        raise ValueError("classes: only a classification stream has classes")
    if len(classes) < 2:
        raise ValueError("classes: name at least two classes, in the order of the "
                         "prediction's probabilities")
    texts = [category_text(c) for c in classes]
    repeated = next((t for k, t in enumerate(texts) if t in texts[:k]), None)
    if repeated is not None:
        raise ValueError(f"classes: class {repeated!r} is given twice")


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
