"""Shift diagnosis: which kind of change raised an alarm (DESIGN.md, "Diagnosis").

Two monitors watch one stream: the covariate monitor (an x-only score) and the conditional
monitor (a weighted CTM on s(x, y)). Each alarm gets a ``kind``:

Covariate alarm
    ``extreme_covariate_shift`` if at least :data:`OUTSIDE_SUPPORT_LEVEL` of the inputs of its
    evidence lie outside the calibration support, else ``benign_covariate_shift``
    (informational). An input is outside when a conformal test against the covariate monitor's
    calibration reference rejects at its ``support_level`` (the x-only p-value, or one
    coordinate beyond the reference range: :class:`~monitor.detectors.CovariateMonitor`);
    under no shift that happens with probability ≤ 0.02 per input at the default 0.01. Either
    way the weighted conditional monitor is told to adapt (a no-op when it already adapts from
    the start, the default).
Conditional alarm
    ``extreme_covariate_shift`` if, among the labelled events of its evidence, at least
    :data:`PENALISED_LEVEL` had a penalised weighted p-value (the test point's own normalised
    weight reached ``penalty_alpha``: WATCH, Sec. 4.3) or at least
    :data:`OUTSIDE_SUPPORT_LEVEL` had inputs outside the calibration support (the test above;
    it covers the alarm raised before the density ratio has learned the new inputs — weights
    are refreshed only every micro-batch and the martingale can cross its threshold within
    one — and the fading of the penalty once such inputs have joined the reference); else
    ``concept_shift``.

"The events of its evidence" are those from the alarm's changepoint estimate to the alarm, or
the last k events for the k in [:data:`MIN_RECENT`, :data:`RECENT`] where the share is largest:
the changepoint estimate (the last minimum of the martingale) can lie hundreds of events before
an abrupt change when the statistic crosses its threshold a few events after it. Under no shift
half of the last k ≥ 5 inputs being outside has probability below 1e-4 per window.

:class:`StreamDetectors` combines both monitors and this diagnosis for one stream.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from numpy.typing import ArrayLike

from monitor.detectors import AlarmEvent, ConditionalMonitor, CovariateMonitor
from monitor.detectors._base import as_row, window_mean
from monitor.martingales._state import check_state, new_state

if TYPE_CHECKING:
    from monitor.config import StreamConfig

__all__ = [
    "ALARM_KINDS",
    "MIN_RECENT",
    "OUTSIDE_SUPPORT_LEVEL",
    "PENALISED_LEVEL",
    "RECENT",
    "DetectorAlarm",
    "StreamDetectors",
    "diagnose_conditional",
    "diagnose_covariate",
]

ALARM_KINDS: tuple[str, ...] = (
    "concept_shift",
    "extreme_covariate_shift",
    "benign_covariate_shift",
)

#: Share of inputs outside the calibration support that makes a shift "extreme" ("mostly").
OUTSIDE_SUPPORT_LEVEL = 0.5
#: Share of penalised weighted p-values in the evidence that makes a conditional alarm extreme.
PENALISED_LEVEL = 0.5
#: Trailing windows of MIN_RECENT..RECENT events up to the alarm are always examined.
MIN_RECENT = 5
RECENT = 20


def diagnose_covariate(outside_fraction: float, level: float = OUTSIDE_SUPPORT_LEVEL) -> str:
    """Kind of a covariate alarm from the share of post-changepoint inputs outside the support.

    Examples
    --------
    >>> diagnose_covariate(0.9), diagnose_covariate(0.01)
    ('extreme_covariate_shift', 'benign_covariate_shift')
    """
    if outside_fraction >= level:  # nan (no history) compares False: benign
        return "extreme_covariate_shift"
    return "benign_covariate_shift"


def diagnose_conditional(
    penalised_fraction: float,
    outside_fraction: float,
    penalised_level: float = PENALISED_LEVEL,
    outside_level: float = OUTSIDE_SUPPORT_LEVEL,
) -> str:
    """Kind of a conditional alarm from the shares of penalised p-values and of inputs outside
    the calibration support among the events of its evidence: extreme covariate shift when
    either reaches its level, else concept shift.

    Examples
    --------
    >>> diagnose_conditional(penalised_fraction=0.8, outside_fraction=0.0)
    'extreme_covariate_shift'
    >>> diagnose_conditional(penalised_fraction=0.0, outside_fraction=0.02)
    'concept_shift'
    """
    if penalised_fraction >= penalised_level or outside_fraction >= outside_level:
        return "extreme_covariate_shift"  # nan compares False
    return "concept_shift"


@dataclass(frozen=True, slots=True)
class DetectorAlarm:
    """An alarm with its diagnosis, as raised by :class:`StreamDetectors` (the pipeline turns
    it into a :class:`monitor.records.Alarm`).

    ``event_index`` and ``changepoint`` are stream event indices when the caller passes
    ``event_index`` to the updates, else indices among that detector's updates.
    """

    detector: str
    kind: str
    event_index: int
    changepoint: int | None
    statistic: float
    threshold: float
    rule: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "kind": self.kind,
            "event_index": self.event_index,
            "changepoint": self.changepoint,
            "statistic": self.statistic,
            "threshold": self.threshold,
            "rule": self.rule,
            "evidence": dict(self.evidence),
        }


class _EventIndex:
    """Stream event index of each of a detector's last ``size`` updates (bounded memory)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.indices: collections.deque[int] = collections.deque(maxlen=size)
        self.n = 0

    def add(self, event_index: int | None) -> int:
        index = self.n if event_index is None else int(event_index)
        self.indices.append(index)
        self.n += 1
        return index

    def lookup(self, update: int | None) -> int | None:
        """Event index of absolute update ``update`` (the oldest kept one if it is older)."""
        if update is None or not self.indices:
            return None
        first = self.n - len(self.indices)
        return self.indices[min(max(update - first, 0), len(self.indices) - 1)]

    def state(self) -> dict[str, Any]:
        return {"size": self.size, "indices": np.asarray(self.indices, np.int64), "n": self.n}

    @classmethod
    def load(cls, state: dict[str, Any]) -> _EventIndex:
        obj = cls(int(state["size"]))
        obj.indices.extend(int(i) for i in np.asarray(state["indices"]).tolist())
        obj.n = int(state["n"])
        return obj


class StreamDetectors:
    """Covariate monitor + weighted conditional monitor + diagnosis for one stream.

    ``update_covariate(x)`` for every prediction event and ``update_conditional(x, score)`` when
    its label is known (in label-arrival order); ``update(x, score)`` does both (``score=None``:
    label not known yet, only the covariate monitor steps). After each call ``new_alarms``
    holds the alarms it raised, diagnosed. A covariate alarm starts the adaptation of the
    weighted conditional monitor.

    Parameters
    ----------
    covariate, conditional
        The two monitors (owned by this object from now on).
    history
        How many recent updates keep their stream event index and support flag, for mapping
        changepoints and for the diagnosis (bounded memory).
    outside_level, penalised_level
        Diagnosis levels (:data:`OUTSIDE_SUPPORT_LEVEL`, :data:`PENALISED_LEVEL`).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X_cal = rng.normal(size=(600, 2))
    >>> cal_scores = np.abs(rng.normal(size=600))
    >>> detectors = StreamDetectors(
    ...     CovariateMonitor("knn", X_cal, threshold=1000.0),
    ...     ConditionalMonitor(cal_scores, X_cal, threshold=1000.0))
    >>> X = np.vstack([rng.normal(size=(300, 2)), rng.normal(size=(200, 2)) + [6.0, 0.0]])
    >>> scores = np.abs(rng.normal(size=500)) * np.r_[np.ones(300), 5 * np.ones(200)]
    >>> for t in range(500):  # inputs leave the support at t = 300 and the model fails there
    ...     detectors.update(X[t], scores[t])
    ...     for a in detectors.new_alarms:
    ...         print(t, a.detector, a.kind, a.changepoint)
    302 conditional extreme_covariate_shift 185
    310 covariate extreme_covariate_shift 295
    """

    def __init__(
        self,
        covariate: CovariateMonitor,
        conditional: ConditionalMonitor,
        history: int = 10_000,
        outside_level: float = OUTSIDE_SUPPORT_LEVEL,
        penalised_level: float = PENALISED_LEVEL,
    ) -> None:
        if not isinstance(covariate, CovariateMonitor):
            raise ValueError(f"covariate must be a CovariateMonitor, got {covariate!r}")
        if not isinstance(conditional, ConditionalMonitor):
            raise ValueError(f"conditional must be a ConditionalMonitor, got {conditional!r}")
        if not (isinstance(history, int) and history >= 1):
            raise ValueError(f"history must be an integer >= 1, got {history!r}")
        for name, level in (("outside_level", outside_level), ("penalised_level", penalised_level)):
            if not 0.0 < float(level) <= 1.0:
                raise ValueError(f"{name} must lie in (0, 1], got {level!r}")
        self.covariate = covariate
        self.conditional = conditional
        self.history = history
        self.outside_level = outside_level
        self.penalised_level = penalised_level
        self._cov_events = _EventIndex(history)
        self._cond_events = _EventIndex(history)
        self._cond_outside: collections.deque[bool] = collections.deque(maxlen=history)
        self._cond_penalised: collections.deque[bool] = collections.deque(maxlen=history)
        self._new: tuple[DetectorAlarm, ...] = ()

    @classmethod
    def from_config(
        cls, config: StreamConfig, calibration_X: ArrayLike, calibration_scores: ArrayLike
    ) -> StreamDetectors:
        """Both monitors as a :class:`monitor.config.StreamConfig` describes them.

        ``calibration_X`` are the calibration events' features (the covariate scorer's input
        and the density ratio's source), ``calibration_scores`` their conditional scores.
        ``betting``, when the configuration sets it, applies to both monitors; otherwise each
        keeps its own default (Composite Jumper for the covariate monitor, the one-sided Simple
        Mixture for the conditional monitor: ``docs/detectors.md``). ``max_reference`` needs
        ``weighted: false`` (the weighted p-values keep every reference point).
        """
        betting: dict[str, Any] = {}
        if config.betting is not None:
            betting["betting"] = config.betting
        if config.weighted and config.max_reference is not None:
            raise ValueError(
                "max_reference (bounded memory) needs weighted: false; the weighted conformal "
                "p-values keep every reference point"
            )
        cov_alarm = config.covariate_alarm or config.alarm
        covariate = CovariateMonitor(
            config.covariate_score,
            calibration_X,
            rule=cov_alarm.rule,
            threshold=cov_alarm.threshold,
            alpha=cov_alarm.alpha,
            rebaseline=config.rebaseline,
            max_reference=config.max_reference,
            seed=config.seed,
            **betting,
        )
        conditional = ConditionalMonitor(
            calibration_scores,
            calibration_X,
            weighted=config.weighted,
            rule=config.alarm.rule,
            threshold=config.alarm.threshold,
            alpha=config.alarm.alpha,
            batch_size=config.weight_batch,
            rebaseline=config.rebaseline,
            max_reference=config.max_reference,
            seed=config.seed,
            **betting,
        )
        return cls(covariate, conditional)

    @property
    def new_alarms(self) -> tuple[DetectorAlarm, ...]:
        """The alarms raised by the last update call, diagnosed."""
        return self._new

    # ---------------------------------------------------------------------------- updates
    def update(
        self, x: ArrayLike, score: float | None = None, event_index: int | None = None
    ) -> None:
        """A prediction event, with its conditional score if the label is already known."""
        self.update_covariate(x, event_index)
        raised = self._new
        if score is not None:
            self.update_conditional(x, score, event_index)
            self._new = raised + self._new

    def prepare(self, X: ArrayLike) -> None:
        """Score the inputs of prediction events about to arrive in one batch (a poll batch);
        no state change, identical results (:meth:`CovariateMonitor.prepare`)."""
        self.covariate.prepare(X)

    def update_covariate(self, x: ArrayLike, event_index: int | None = None) -> None:
        """Step the covariate monitor with the inputs of one prediction event."""
        self._new = ()
        self._cov_events.add(event_index)
        self.covariate.update(x)
        for event in self.covariate.last_alarms:
            self._new = (*self._new, self._covariate_alarm(event))
            self.conditional.start_adaptation()

    def update_conditional(
        self, x: ArrayLike, score: float, event_index: int | None = None
    ) -> None:
        """Step the conditional monitor with a labelled event's features and score."""
        row = as_row(x, self.covariate.n_features)  # checked once, for both monitors
        self._new = ()
        self._cond_events.add(event_index)
        self._cond_outside.append(self.covariate._is_outside_row(row))
        self.conditional._update_row(row, score)
        self._cond_penalised.append(self.conditional.penalised)
        for event in self.conditional.last_alarms:
            self._new = (*self._new, self._conditional_alarm(event))

    # -------------------------------------------------------------------------- diagnosis
    def _covariate_alarm(self, event: AlarmEvent) -> DetectorAlarm:
        outside = _evidence_share(self.covariate.outside_fraction, event)
        kind = diagnose_covariate(outside, self.outside_level)
        evidence = self._evidence(event, covariate_statistic=_exp(event.log_statistic))
        evidence["outside_support_fraction"] = outside
        return self._record("covariate", kind, event, self._cov_events, evidence)

    def _conditional_alarm(self, event: AlarmEvent) -> DetectorAlarm:
        n = self._cond_events.n

        def outside_in(start: int, stop: int) -> float:
            return window_mean(self._cond_outside, n, start, stop)

        def penalised_in(start: int, stop: int) -> float:
            return window_mean(self._cond_penalised, n, start, stop)

        outside = _evidence_share(outside_in, event)
        penalised = _evidence_share(penalised_in, event)
        kind = diagnose_conditional(penalised, outside, self.penalised_level, self.outside_level)
        evidence = self._evidence(event, covariate_statistic=self.covariate.statistic)
        evidence["outside_support_fraction"] = outside
        evidence["penalised_fraction"] = penalised
        evidence["penalised_fraction_since_adaptation"] = self.conditional.penalised_fraction
        return self._record("conditional", kind, event, self._cond_events, evidence)

    def _evidence(self, event: AlarmEvent, covariate_statistic: float) -> dict[str, Any]:
        cond = self.conditional
        return {
            "covariate_statistic": covariate_statistic,
            "penalised_fraction": cond.penalised_fraction,
            "weights_ess": cond.weights_ess,
            "adapting": cond.adapting,
            "log_statistic": event.log_statistic,
            "log_martingale": event.log_martingale,
        }

    def _record(
        self,
        detector: str,
        kind: str,
        event: AlarmEvent,
        index: _EventIndex,
        evidence: dict[str, Any],
    ) -> DetectorAlarm:
        monitor = self.covariate if detector == "covariate" else self.conditional
        return DetectorAlarm(
            detector=detector,
            kind=kind,
            event_index=int(index.lookup(event.index) or 0),
            changepoint=index.lookup(event.changepoint),
            statistic=_exp(event.log_statistic),
            threshold=_exp(event.log_threshold),
            rule=monitor.rule,
            evidence=evidence,
        )

    # ---------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state of both monitors and the diagnosis history."""
        return new_state(
            self,
            params={
                "history": self.history,
                "outside_level": self.outside_level,
                "penalised_level": self.penalised_level,
            },
            covariate=self.covariate.state_dict(),
            conditional=self.conditional.state_dict(),
            cov_events=self._cov_events.state(),
            cond_events=self._cond_events.state(),
            cond_outside=np.asarray(self._cond_outside, np.uint8),
            cond_penalised=np.asarray(self._cond_penalised, np.uint8),
            new_alarms=[a.to_json() for a in self._new],
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild from :meth:`state_dict` output; continues exactly."""
        check_state(state, cls)
        obj = cls(
            CovariateMonitor.from_state(state["covariate"]),
            ConditionalMonitor.from_state(state["conditional"]),
            **state["params"],
        )
        obj._cov_events = _EventIndex.load(state["cov_events"])
        obj._cond_events = _EventIndex.load(state["cond_events"])
        obj._cond_outside.extend(np.asarray(state["cond_outside"], bool).tolist())
        obj._cond_penalised.extend(np.asarray(state["cond_penalised"], bool).tolist())
        obj._new = tuple(DetectorAlarm(**a) for a in state["new_alarms"])
        return obj


def _evidence_share(share: Callable[[int, int], float], event: AlarmEvent) -> float:
    """The largest share of flagged events since the alarm's changepoint or in a trailing
    window of MIN_RECENT..RECENT events up to the alarm (nan only when no flag is kept)."""
    start = event.index if event.changepoint is None else event.changepoint
    starts = [start, *(event.index - k + 1 for k in range(MIN_RECENT, RECENT + 1))]
    kept = [v for v in (share(a, event.index) for a in starts) if not math.isnan(v)]
    return max(kept) if kept else math.nan


def _exp(log_value: float) -> float:
    return math.exp(min(log_value, math.log(1e300)))
