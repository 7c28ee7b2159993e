"""The pair of monitors of one stream: the covariate monitor, the weighted conditional monitor and
the diagnosis of their alarms (:mod:`monitor.core.diagnosis`), fed one event at a time
(``update_*``, for notebooks and as the reference) or a poll batch at a time
(:meth:`StreamDetectors.update_batch`, the worker's path; identical results).

:class:`StreamDetectors` is built here (construction, the per-event updates, the time budgets,
the state); its alarms are diagnosed in :mod:`monitor.streams.detector_diagnosis` and its batches
run in :mod:`monitor.streams.detector_batches`.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.core.detectors.base import FloatArray, as_row, check_int
from monitor.core.diagnosis import MIN_EVIDENCE, OUTSIDE_SUPPORT_LEVEL, PENALISED_LEVEL
from monitor.core.martingales.alarms import EventRateThreshold, Ville
from monitor.core.martingales.state import check_state, new_state
from monitor.core.ood import Scorer, make_scorer
from monitor.streams.config import BUDGET_SHARE, DEFAULT_THRESHOLD
from monitor.streams.detector_batches import BatchResult, BatchUpdates
from monitor.streams.detector_diagnosis import DetectorAlarm, EventIndex, PendingAlarm

if TYPE_CHECKING:
    from monitor.streams.config import AlarmConfig, StreamConfig

__all__ = ["BatchResult", "DetectorAlarm", "StreamDetectors"]


class StreamDetectors(BatchUpdates):
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
    budgets
        A time budget's threshold per detector (``"covariate"``, ``"conditional"``): before
        each update it sets that monitor's threshold, which then follows the detector's update
        rate on event time (an update without ``ts`` runs on the budget's event-count
        threshold, :attr:`EventRateThreshold.event_threshold`).
    min_events
        Fewest events from an alarm's changepoint to the alarm from which its kind is decided
        (:data:`MIN_EVIDENCE`); an alarm with fewer is raised as ``insufficient_evidence`` and
        revised (a new :class:`DetectorAlarm` with the same ``event_index`` and ``revision`` 2
        in ``new_alarms``) after the update that completes its evidence.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X_cal = rng.normal(size=(600, 2))
    >>> cal_scores = np.abs(rng.normal(size=600))
    >>> detectors = StreamDetectors(
    ...     CovariateMonitor("knn", X_cal, threshold=1000.0),
    ...     ConditionalMonitor(cal_scores, X_cal))
    >>> X = np.vstack([rng.normal(size=(300, 2)), rng.normal(size=(200, 2)) + [6.0, 0.0]])
    >>> scores = np.abs(rng.normal(size=500)) * np.r_[np.ones(300), 5 * np.ones(200)]
    >>> for t in range(500):  # inputs leave the support at t = 300 and the model fails there
    ...     detectors.update(X[t], scores[t])
    ...     for a in detectors.new_alarms:
    ...         print(t, a.detector, a.kind, a.changepoint)
    302 conditional insufficient_evidence 300
    309 conditional extreme_covariate_shift 300
    310 covariate insufficient_evidence 303
    312 covariate extreme_covariate_shift 303
    """

    def __init__(
        self,
        covariate: CovariateMonitor,
        conditional: ConditionalMonitor,
        history: int = 10_000,
        outside_level: float = OUTSIDE_SUPPORT_LEVEL,
        penalised_level: float = PENALISED_LEVEL,
        budgets: dict[str, EventRateThreshold] | None = None,
        min_events: int = MIN_EVIDENCE,
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
        budgets = dict(budgets or {})
        for name, budget in budgets.items():
            if name not in ("covariate", "conditional"):
                raise ValueError(f"budgets are keyed 'covariate' or 'conditional', got {name!r}")
            if not isinstance(budget, EventRateThreshold):
                raise ValueError(f"budgets[{name!r}] must be an EventRateThreshold")
            if (covariate if name == "covariate" else conditional).rule == "ville":
                raise ValueError(f"the {name} monitor's ville rule takes no budget")
        self.budgets = budgets
        check_int("min_events", min_events, 1)
        if min_events > history // 2:
            raise ValueError(
                f"min_events must be at most history // 2 = {history // 2}, got {min_events}"
            )
        self.covariate = covariate
        self.conditional = conditional
        self.history = history
        self.outside_level = outside_level
        self.penalised_level = penalised_level
        self.min_events = min_events
        self._pending: list[PendingAlarm] = []
        self._cov_events = EventIndex(history)
        self._cond_events = EventIndex(history)
        self._cond_outside: collections.deque[bool] = collections.deque(maxlen=history)
        self._cond_penalised: collections.deque[bool] = collections.deque(maxlen=history)
        self._new: tuple[DetectorAlarm, ...] = ()

    @classmethod
    def from_config(
        cls, config: StreamConfig, calibration_X: ArrayLike, calibration_scores: ArrayLike,
        *, mixed: bool = False, ratio_columns: ArrayLike | None = None,
        outside_columns: tuple[int, ...] = (),
    ) -> StreamDetectors:
        """Both monitors as a :class:`monitor.streams.config.StreamConfig` describes them.

        ``calibration_X`` are the calibration events' features (the covariate scorer's input
        and the density ratio's source), ``calibration_scores`` their conditional scores.
        ``betting``, when the configuration sets it, applies to both monitors; otherwise each
        keeps its own default (Composite Jumper for the covariate monitor, the one-sided plug-in
        power for the conditional monitor: ``docs/detectors.md``). ``max_reference`` needs
        ``weighted: false``; a weighted stream bounds its reference with ``reference_window``.

        ``mixed``: ``calibration_X`` is a tabular schema's mixed embedding (docs/tabular.md),
        already scaled, so a ``knn`` covariate score reads it without standardising again (its
        squared distance is then the Gower-type distance); ``ratio_columns`` are its numeric
        columns, the only ones the density ratio's normal-scores transform applies to, and
        ``outside_columns`` its unseen-category columns (an input with one set is outside the
        calibration support).
        """
        betting: dict[str, Any] = {}
        if config.betting is not None:
            betting["betting"] = config.betting
        if config.weighted and config.max_reference is not None:
            raise ValueError(
                "max_reference (quantized bounded memory) needs weighted: false; a weighted "
                "stream bounds its reference with reference_window"
            )
        cov_alarm = config.covariate_alarm or config.alarm
        budgets = {
            name: _time_budget(alarm)
            for name, alarm in (("covariate", cov_alarm), ("conditional", config.alarm))
            if alarm.budget_seconds is not None
        }
        scorer: Scorer | str = config.covariate_score
        if mixed and scorer == "knn":
            scorer = make_scorer("knn", standardize=False, normalize=False, k=1,
                                 input_kind="features")
        covariate = CovariateMonitor(
            scorer,
            calibration_X,
            rule=cov_alarm.rule,
            threshold=_first_threshold(cov_alarm),
            alpha=cov_alarm.alpha,
            rebaseline=config.rebaseline,
            max_reference=config.max_reference,
            # its own bound, weighted or not (the conditional monitor reads only its alarms)
            reference_limit=None if config.max_reference is not None
            else config.covariate_reference_limit,
            reference_bank=config.reference_bank,
            seed=config.seed,
            outside_columns=outside_columns,
            **betting,
        )
        conditional = ConditionalMonitor(
            calibration_scores,
            calibration_X,
            weighted=config.weighted,
            rule=config.alarm.rule,
            threshold=_first_threshold(config.alarm),
            alpha=config.alarm.alpha,
            batch_size=config.weight_batch,
            rebaseline=config.rebaseline,
            max_reference=config.max_reference,
            reference_window=config.reference_window,
            seed=config.seed,
            ratio_columns=ratio_columns,
            **betting,
        )
        for monitor, alarm in ((covariate, cov_alarm), (conditional, config.alarm)):
            if alarm.rule == "ville" and alarm.spending != "per_segment":
                monitor._test.rule = Ville(alpha=alarm.alpha, spending=alarm.spending)
        return cls(
            covariate, conditional, budgets=budgets, min_events=config.diagnosis.min_events
        )

    @property
    def new_alarms(self) -> tuple[DetectorAlarm, ...]:
        """The alarms raised by the last update call, diagnosed."""
        return self._new

    # ---------------------------------------------------------------------------- updates
    def update(
        self,
        x: ArrayLike,
        score: float | None = None,
        event_index: int | None = None,
        ts: float | None = None,
    ) -> None:
        """A prediction event, with its conditional score if the label is already known;
        ``ts`` is its event time in seconds (needed by a time budget)."""
        self.update_covariate(x, event_index, ts)
        raised = self._new
        if score is not None:
            self.update_conditional(x, score, event_index, ts)
            self._new = raised + self._new

    def update_covariate(
        self, x: ArrayLike, event_index: int | None = None, ts: float | None = None
    ) -> None:
        """Step the covariate monitor with the inputs of one prediction event (event time
        ``ts`` in seconds)."""
        if "covariate" in self.budgets:
            as_row(x, self.covariate.n_features)  # a bad row changes nothing, the budget included
            self._budget_step("covariate", ts)
        self._new = ()
        self._cov_events.add(event_index)
        self.covariate.update(x)
        for event in self.covariate.last_alarms:
            self._new = (*self._new, self._covariate_alarm(event))
            self.conditional.start_adaptation()
        self._new += tuple(a for _, a in self._revisions("covariate", self.covariate.n_seen))

    def update_conditional(
        self,
        x: ArrayLike,
        score: float,
        event_index: int | None = None,
        ts: float | None = None,
    ) -> None:
        """Step the conditional monitor with a labelled event's features and score (``ts``:
        the event time of the label's arrival, in seconds)."""
        row = as_row(x, self.covariate.n_features)  # checked once, for both monitors
        self._budget_step("conditional", ts)
        self._new = ()
        self._cond_events.add(event_index)
        self._cond_outside.append(self.covariate._is_outside_row(row))
        self.conditional._update_row(row, score)
        self._cond_penalised.append(self.conditional.penalised)
        for event in self.conditional.last_alarms:
            self._new = (*self._new, self._conditional_alarm(event))
        self._new += tuple(a for _, a in self._revisions("conditional", self._cond_events.n))

    # ------------------------------------------------- pending alarms after a replacement
    @property
    def pending(self) -> tuple[DetectorAlarm, ...]:
        """The alarms raised as ``insufficient_evidence`` whose evidence is not complete yet."""
        return tuple(p.alarm for p in self._pending)

    def track_pending(
        self,
        X_cov: FloatArray,
        cov_index: Sequence[int],
        X_cond: FloatArray,
        cond_index: Sequence[int],
    ) -> list[tuple[str, int, DetectorAlarm]]:
        """For detectors replaced by a new configuration version: complete the evidence of
        their pending alarms, nothing else. The predictions' inputs ``X_cov`` (stream event
        indexes ``cov_index``) and the labelled events' inputs ``X_cond`` (``cond_index``, in
        the order their labels joined) count as updates for the support flags only (no test,
        no alarm; :meth:`CovariateMonitor.track_support`), each detector's only up to the last
        update its pending alarms need; the revisions they complete, as ``(detector, position
        among that detector's updates of the call, alarm)``. The same revisions whether the
        updates come one by one or in batches (a support flag depends on its row alone); an
        update with no pending alarm left is not counted: the object is then done with."""
        out: list[tuple[str, int, DetectorAlarm]] = []
        for detector, X, index in (("covariate", X_cov, cov_index),
                                   ("conditional", X_cond, cond_index)):
            ends = [p.end for p in self._pending if p.alarm.detector == detector]
            covariate = detector == "covariate"
            n0 = self.covariate.n_seen if covariate else self._cond_events.n
            k = min(max(ends, default=n0 - 1) + 1 - n0, X.shape[0])
            if k <= 0:
                continue
            if covariate:
                self.covariate.track_support(X[:k])
                self._cov_events.extend(index[:k])
            else:
                self._cond_outside.extend(self.covariate.is_outside(X[:k]).tolist())
                self._cond_penalised.extend([False] * k)  # a revision does not read them
                self._cond_events.extend(index[:k])
            out += [(detector, end - n0, a) for end, a in self._revisions(detector, n0 + k)]
        return out


    # ----------------------------------------------------------------------------- budget
    def _budget_step(self, detector: str, ts: float | None) -> None:
        """Set the detector's threshold for its next update from its time budget, if any."""
        budget = self.budgets.get(detector)
        if budget is None:
            return
        # An update without an event time runs on the event-count threshold (a NaN time).
        threshold = float(budget.thresholds([math.nan if ts is None else ts])[0])
        monitor = self.covariate if detector == "covariate" else self.conditional
        monitor._test.rule.set_threshold(threshold)  # type: ignore[attr-defined]


    # ---------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state of both monitors and the diagnosis history (and the time budgets'
        rate estimators, when there are any: a state without them is the one of before)."""
        budgets = {name: budget.state_dict() for name, budget in self.budgets.items()}
        return new_state(
            self,
            params={
                "history": self.history,
                "outside_level": self.outside_level,
                "penalised_level": self.penalised_level,
                "min_events": self.min_events,
            },
            covariate=self.covariate.state_dict(),
            conditional=self.conditional.state_dict(),
            **({"budgets": budgets} if budgets else {}),
            cov_events=self._cov_events.state(),
            cond_events=self._cond_events.state(),
            cond_outside=np.asarray(self._cond_outside, np.uint8),
            cond_penalised=np.asarray(self._cond_penalised, np.uint8),
            new_alarms=[a.to_json() for a in self._new],
            pending=[p.to_json() for p in self._pending],
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        """Rebuild from :meth:`state_dict` output; continues exactly."""
        check_state(state, cls)
        obj = cls(
            CovariateMonitor.from_state(state["covariate"]),
            ConditionalMonitor.from_state(state["conditional"]),
            **state["params"],
            budgets={
                name: EventRateThreshold.from_state(budget)
                for name, budget in state.get("budgets", {}).items()
            },
        )
        obj._cov_events = EventIndex.load(state["cov_events"])
        obj._cond_events = EventIndex.load(state["cond_events"])
        obj._cond_outside.extend(np.asarray(state["cond_outside"], bool).tolist())
        obj._cond_penalised.extend(np.asarray(state["cond_penalised"], bool).tolist())
        obj._new = tuple(DetectorAlarm(**a) for a in state["new_alarms"])
        obj._pending = [PendingAlarm.load(p) for p in state.get("pending", [])]
        return obj


def _time_budget(alarm: AlarmConfig) -> EventRateThreshold:
    assert alarm.budget_seconds is not None
    # min_threshold and events are filled in with the budget
    assert alarm.min_threshold is not None and alarm.events is not None
    return EventRateThreshold(alarm.budget_seconds, share=BUDGET_SHARE, floor=alarm.min_threshold,
                              events=alarm.events)


def _first_threshold(alarm: AlarmConfig) -> float:
    """The threshold a monitor starts with: the configured one, or a time budget's warm-up
    threshold, its event-count one (Ville's comes from alpha)."""
    if alarm.budget_seconds is not None:
        return _time_budget(alarm).threshold
    return alarm.fixed_threshold or DEFAULT_THRESHOLD
