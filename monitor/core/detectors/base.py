"""Machinery shared by the detectors: the betting + alarm-rule pair with absolute indexing,
the re-baselining life cycle, argument checks and seeds.

Life cycle of a detector (both monitors)::

    MONITORING --alarm--> WARMING_UP (collect `rebaseline` events) --> MONITORING (fresh reference)
              \\--alarm, rebaseline = 0--> STOPPED (no more alarms)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Generic, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.martingales import (
    ALARM_RULES,
    BETTING_FUNCTIONS,
    CUSUM,
    AlarmRule,
    BettingFunction,
    ShiryaevRoberts,
    Ville,
    make_alarm_rule,
    make_betting,
)

FloatArray = NDArray[np.float64]

MONITORING, WARMING_UP, STOPPED = "monitoring", "warming_up", "stopped"

_BETTING_BY_CLASS: dict[str, type[BettingFunction]] = {
    cls.__name__: cls for cls in BETTING_FUNCTIONS.values()
}
_RULE_BY_CLASS: dict[str, type[AlarmRule]] = {
    cls.__name__: cls for cls in (Ville, CUSUM, ShiryaevRoberts)
}


#: The alarm record of a :class:`Lifecycle`.
A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class AlarmEvent:
    """One alarm as the detector saw it (the diagnosis turns it into a :class:`DetectorAlarm`).

    Attributes
    ----------
    index
        Absolute index of the update that raised the alarm (counted from 0 since construction).
    changepoint
        Absolute index of the first update of the evidence that raised it (the rule's estimate).
    log_statistic, log_threshold
        Natural logs of the rule's statistic at the alarm and of its threshold.
    log_martingale
        log S of the betting martingale at the alarm.
    """

    index: int
    changepoint: int | None
    log_statistic: float
    log_threshold: float
    log_martingale: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class BatchTrace:
    """Values after each update of a batch, exactly as the monitor's properties read then."""

    p_value: np.ndarray  # float64 (n,)  == monitor.p_value after update i
    log_martingale: np.ndarray  # float64 (n,)  == monitor.log_martingale after update i
    log_statistic: np.ndarray  # float64 (n,)  == monitor.log_statistic after update i
    weights_ess: np.ndarray | None = None  # conditional only: monitor.weights_ess after update i
    penalised: np.ndarray | None = None  # conditional only (bool): monitor.penalised after update i
    #: covariate only (bool): whether input i is outside the calibration support (its flag as
    #: :meth:`CovariateMonitor.is_outside` gives it), so that a caller need not score it again
    outside: np.ndarray | None = None

    @classmethod
    def empty(cls, n: int, conditional: bool = False) -> BatchTrace:
        if not conditional:
            return cls(np.empty(n), np.empty(n), np.empty(n))
        return cls(np.empty(n), np.empty(n), np.empty(n), np.empty(n), np.zeros(n, bool))


#: ``on_alarm(i, event)`` of ``update_batch``: batch position and the alarm it raised.
AlarmCallback = Callable[[int, AlarmEvent], None]


class SequentialTest:
    """A betting function and an alarm rule restarted together, with absolute event indices.

    ``offset`` is the absolute index of the first update since the last restart, so the rule's
    changepoint (counted in updates since its reset) maps to ``offset + changepoint``.
    """

    def __init__(self, betting: str, rule: str, threshold: float, alpha: float) -> None:
        self.betting = make_betting(betting)
        self.rule = make_alarm_rule(rule, threshold=threshold, alpha=alpha)
        self.offset = 0

    @property
    def changepoint(self) -> int | None:
        cp = self.rule.changepoint
        return None if cp is None or self.rule.n == 0 else self.offset + int(cp)

    def step(self, p: float) -> bool:
        """Bet on one p-value; True if the rule alarms."""
        self.betting.update(p)
        self.rule.update(self.betting.log_martingale)
        return self.rule.alarm

    def step_many(self, ps: FloatArray) -> AlarmEvent | None:
        """Bet on a batch; the first alarm (rule state then as right after it), else None.

        ``AlarmEvent.index`` is the position of the alarm within ``ps``.
        """
        before = self.rule.state_dict()
        path = self.betting.update_many(ps)
        hit = self.rule.update_many(path)
        if hit is None:
            return None
        if hit < path.size - 1:
            # Replay the rule up to the alarm so its statistic and changepoint are those of the
            # alarm step, exactly as with per-event updates (the betting restarts anyway).
            self.rule = type(self.rule).from_state(before)
            self.rule.update_many(path[: hit + 1])
        return self.alarm_event(hit, float(path[hit]))

    def alarm_event(self, index: int, log_martingale: float | None = None) -> AlarmEvent:
        """The alarm at absolute ``index`` as the rule sees it now."""
        log_s = self.betting.log_martingale if log_martingale is None else log_martingale
        return AlarmEvent(
            index, self.changepoint, self.rule.log_statistic, self.rule.log_threshold, log_s
        )

    def restart(self, offset: int) -> None:
        """S back to 1 and a fresh rule; the next update has absolute index ``offset``."""
        self.betting.reset()
        self.rule.reset()
        self.offset = offset

    def state_dict(self) -> dict[str, Any]:
        return {
            "betting": self.betting.state_dict(),
            "rule": self.rule.state_dict(),
            "offset": self.offset,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> SequentialTest:
        obj = cls.__new__(cls)
        obj.betting = _BETTING_BY_CLASS[state["betting"]["class"]].from_state(state["betting"])
        obj.rule = _RULE_BY_CLASS[state["rule"]["class"]].from_state(state["rule"])
        obj.offset = int(state["offset"])
        return obj


# ------------------------------------------------------------------------------ validation


def check_choice(name: str, value: object, valid: tuple[str, ...] | list[str]) -> None:
    """Raise a ValueError naming the valid values when ``value`` is not one of them."""
    if value not in valid:
        raise ValueError(f"{name} must be one of {sorted(valid)}, got {value!r}")


def check_test_params(betting: str, rule: str, threshold: float, alpha: float) -> None:
    """Validate the betting function and the AlarmConfig-like rule parameters."""
    check_choice("betting", betting, list(BETTING_FUNCTIONS))
    check_choice("rule", rule, list(ALARM_RULES))
    if not (isinstance(threshold, int | float) and 1.0 < threshold < math.inf):
        raise ValueError(f"threshold must be a finite number > 1, got {threshold!r}")
    if not (isinstance(alpha, int | float) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")


def check_int(name: str, value: object, minimum: int, allow_none: bool = False) -> None:
    """Raise unless ``value`` is an integer >= ``minimum`` (or None when allowed)."""
    if value is None and allow_none:
        return
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= minimum
    if not ok:
        none = "None or " if allow_none else ""
        raise ValueError(f"{name} must be {none}an integer >= {minimum}, got {value!r}")


def check_lifecycle(rebaseline: object, max_reference: object, seed: object) -> None:
    """Validate the re-baselining window, the bounded-memory cap and the seed."""
    check_int("rebaseline", rebaseline, 0)
    if rebaseline == 1:
        raise ValueError("rebaseline must be 0 (stop after an alarm) or >= 2, got 1")
    check_int("max_reference", max_reference, 2, allow_none=True)
    check_seed(seed)


def check_seed(seed: object) -> None:
    if seed is not None and not (isinstance(seed, int | np.integer) and not isinstance(seed, bool)):
        raise ValueError(f"seed must be None or an integer, got {seed!r}")


def as_matrix(X: ArrayLike, name: str, min_rows: int = 1) -> FloatArray:
    """``X`` as a finite float64 matrix (n, d) with at least ``min_rows`` rows."""
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < min_rows or arr.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-d array with >= {min_rows} rows, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def as_row(x: ArrayLike, n_features: int) -> FloatArray:
    """One feature vector as a (1, d) matrix, checked against the calibration width."""
    arr = np.asarray(x, dtype=np.float64).reshape(1, -1)
    # NaN and inf propagate through a sum, so a finite sum means finite entries (a sum that
    # overflows is checked entry by entry): a third of np.isfinite(arr).all() on one row.
    if arr.shape[1] != n_features or not (
        math.isfinite(sum(arr[0].tolist())) or np.isfinite(arr).all()
    ):
        raise ValueError(f"x must be {n_features} finite numbers, got {arr.ravel().tolist()!r}")
    return arr


def window_mean(flags: Sequence[bool], n: int, start: int, stop: int) -> float:
    """Mean of the flags of absolute updates ``start..stop`` (inclusive), where ``flags`` holds
    the last ``len(flags)`` of ``n`` updates; nan when none of them is kept."""
    first = n - len(flags)
    lo, hi = max(start, first) - first, min(stop, n - 1) - first
    if hi < lo:
        return math.nan
    return float(np.mean([flags[i] for i in range(lo, hi + 1)]))


def derive_seed(seed: int | None, *keys: int) -> int | None:
    """An independent child seed of ``seed`` for each ``keys`` (None stays None)."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), *keys]).generate_state(1, np.uint32)[0])


_LOG_CAP = math.log(1e300)


class Lifecycle(Generic[A]):
    """The read-only lifecycle of a monitor that alarms and re-baselines (the martingale
    monitors here, the data-quality monitor): its last alarms, its counts, its phase."""

    _last_alarms: tuple[A, ...]
    _n_seen: int
    _n_alarms: int
    _phase: str

    @property
    def alarm(self) -> bool:
        """True if the last update (or update batch) raised an alarm."""
        return bool(self._last_alarms)

    @property
    def last_alarms(self) -> tuple[A, ...]:
        """The alarms raised by the last update (several are possible in a batch update)."""
        return self._last_alarms

    @property
    def n_seen(self) -> int:
        """Updates since construction (the next update gets this absolute index)."""
        return self._n_seen

    @property
    def n_alarms(self) -> int:
        """Alarms raised since construction."""
        return self._n_alarms

    @property
    def phase(self) -> str:
        """``"monitoring"``, ``"warming_up"`` (collecting a fresh reference after an alarm) or
        ``"stopped"`` (after an alarm with ``rebaseline=0``)."""
        return self._phase


class MartingaleMonitor(Lifecycle[AlarmEvent]):
    """State and read-only properties shared by the covariate and conditional monitors.

    Subclasses compute one conformal p-value per update and call :meth:`_bet` with it while
    monitoring, collect the fresh reference while warming up, and call :meth:`_resume` when the
    warm-up window is full.
    """

    rebaseline: int

    def _init_test(self, betting: str, rule: str, threshold: float, alpha: float) -> None:
        self._test = SequentialTest(betting, rule, threshold, alpha)
        self._phase = MONITORING
        self._n_seen = 0
        self._n_alarms = 0
        self._p_value = math.nan
        self._last_alarms: tuple[AlarmEvent, ...] = ()
        self._frozen: AlarmEvent | None = None

    # -------------------------------------------------------------------------- properties
    @property
    def p_value(self) -> float:
        """The last conformal p-value (nan when the last update computed none: warm-up, stop)."""
        return self._p_value

    @property
    def log_martingale(self) -> float:
        """log S of the test martingale (frozen at its alarm value during warm-up / stop)."""
        if self._frozen is not None:
            return self._frozen.log_martingale
        return self._test.betting.log_martingale

    @property
    def log_statistic(self) -> float:
        """log of the alarm rule's statistic (S for Ville, γ for CUSUM, R for SR)."""
        if self._frozen is not None:
            return self._frozen.log_statistic
        return self._test.rule.log_statistic

    @property
    def statistic(self) -> float:
        """The alarm rule's statistic, capped at 1e300."""
        return math.exp(min(self.log_statistic, _LOG_CAP))

    @property
    def log_threshold(self) -> float:
        return self._test.rule.log_threshold

    @property
    def threshold(self) -> float:
        """The level the statistic must reach: ``threshold`` for CUSUM/SR, 1/alpha for Ville."""
        return self._test.rule.threshold

    @property
    def changepoint(self) -> int | None:
        """Absolute index of the first update of the current evidence (of the alarm's evidence
        during warm-up / stop); None before any evidence."""
        if self._frozen is not None:
            return self._frozen.changepoint
        return self._test.changepoint

    # ----------------------------------------------------------------------- life cycle
    def _start_update(self) -> None:
        self._last_alarms = ()

    def _raise(self, event: AlarmEvent) -> None:
        """Record an alarm, restart the test and leave the monitoring phase."""
        self._last_alarms = (*self._last_alarms, event)
        self._n_alarms += 1
        self._frozen = event
        self._test.restart(event.index + 1)
        self._phase = WARMING_UP if self.rebaseline > 0 else STOPPED
        self._on_alarm()

    def _on_alarm(self) -> None:
        """Hook: drop what the old regime's reference no longer needs."""

    def _trace_idle(self, trace: BatchTrace, start: int, stop: int) -> None:
        """Trace of updates start..stop-1 that computed no p-value and left the properties
        unchanged (warm-up before its last event, stop): those of the monitor now."""
        trace.p_value[start:stop] = math.nan
        trace.log_martingale[start:stop] = self.log_martingale
        trace.log_statistic[start:stop] = self.log_statistic

    def _trace_now(self, trace: BatchTrace, i: int) -> None:
        """Trace of update i: the properties now."""
        trace.p_value[i] = self._p_value
        trace.log_martingale[i] = self.log_martingale
        trace.log_statistic[i] = self.log_statistic

    def _batch_phases(
        self,
        n: int,
        trace: BatchTrace,
        on_alarm: AlarmCallback | None,
        monitor_span: Callable[[int], tuple[int, AlarmEvent | None]],
        warmup_left: Callable[[], int],
        collect: Callable[[int, int], None],
        after_span: Callable[[int, int], None] | None = None,
    ) -> None:
        """The phases of ``update_batch`` over updates 0..n-1: ``monitor_span(i)`` bets on a
        span from i while monitoring (how many it used, and the alarm that ended it);
        warm-up spans call ``collect(start, stop)`` with at most ``warmup_left()`` updates;
        a stopped monitor takes the rest. ``after_span(start, stop)`` runs after each span,
        before ``on_alarm``."""
        i = 0
        while i < n:
            event = None
            if self._phase == MONITORING:
                used, event = monitor_span(i)
            elif self._phase == WARMING_UP:
                used = min(warmup_left(), n - i)
                self._trace_idle(trace, i, i + used - 1)
                self._n_seen += used
                self._p_value = math.nan
                collect(i, i + used)
                self._trace_now(trace, i + used - 1)
            else:  # stopped
                used = n - i
                self._n_seen += used
                self._p_value = math.nan
                self._trace_idle(trace, i, n)
            if after_span is not None:
                after_span(i, i + used)
            i += used
            if event is not None and on_alarm is not None:
                on_alarm(i - 1, event)

    def _end_span(
        self, used: int, alarm: bool, alarms: list[AlarmEvent]
    ) -> tuple[int, AlarmEvent | None]:
        """Count a compiled span's ``used`` updates; raise its alarm if it ended on one."""
        self._n_seen += used
        if not alarm:
            return used, None
        event = self._test.alarm_event(self._n_seen - 1)
        self._batch_alarm(event, alarms)
        return used, event

    def _batch_alarm(self, event: AlarmEvent, alarms: list[AlarmEvent]) -> None:
        """Raise an alarm inside a batch: ``last_alarms`` is (event,) as after that update."""
        self._last_alarms = ()
        self._raise(event)
        alarms.append(event)

    def _resume(self) -> None:
        """Back to monitoring: the next update is step 1 of a fresh martingale."""
        self._test.restart(self._n_seen)
        self._frozen = None
        self._phase = MONITORING

    # ---------------------------------------------------------------------------- state
    def _monitor_state(self) -> dict[str, Any]:
        return {
            "test": self._test.state_dict(),
            "phase": self._phase,
            "n_seen": self._n_seen,
            "n_alarms": self._n_alarms,
            "p_value": self._p_value,
            "last_alarms": [a.to_json() for a in self._last_alarms],
            "frozen": None if self._frozen is None else self._frozen.to_json(),
        }

    def _load_monitor_state(self, state: dict[str, Any]) -> None:
        self._test = SequentialTest.from_state(state["test"])
        self._phase = str(state["phase"])
        self._n_seen = int(state["n_seen"])
        self._n_alarms = int(state["n_alarms"])
        self._p_value = float(state["p_value"])
        self._last_alarms = tuple(AlarmEvent(**a) for a in state["last_alarms"])
        self._frozen = None if state["frozen"] is None else AlarmEvent(**state["frozen"])
