"""Alarm rules on a log test martingale: when does the evidence count as a change?

Each rule consumes log S_n after every step of a betting function that started (or was reset)
together with the rule, S_0 = 1.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.martingales.state import check_state, decode_float, encode_float, new_state

#: ``statistic`` is exp(log_statistic) capped here so it always fits a float / JSON number.
STATISTIC_CAP = 1e300
_LOG_CAP = math.log(STATISTIC_CAP)


def as_log_path(log_s: ArrayLike) -> NDArray[np.float64]:
    arr = np.asarray(log_s, dtype=np.float64).reshape(-1)
    if np.isnan(arr).any():
        raise ValueError("log-martingale values must not be NaN")
    return arr


class AlarmRule(ABC):
    """A statistic of the martingale path and a threshold; ``alarm`` latches until reset."""

    _log_threshold: float

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget the path; the next update is step 1 of a martingale with S_0 = 1."""
        self._n = 0
        self._alarm = False
        self._log_stat = 0.0
        self._min = RunningMinimum()

    @property
    def alarm(self) -> bool:
        """True once the statistic has reached the threshold (stays True until reset)."""
        return self._alarm

    @property
    def log_statistic(self) -> float:
        return self._log_stat

    @property
    def statistic(self) -> float:
        """exp(log_statistic), capped at 1e300."""
        return STATISTIC_CAP if self._log_stat >= _LOG_CAP else math.exp(self._log_stat)

    @property
    def log_threshold(self) -> float:
        return self._log_threshold

    @property
    def threshold(self) -> float:
        """The level the statistic must reach (Ville: 1/alpha)."""
        return math.exp(self._log_threshold)

    @property
    def n(self) -> int:
        """Number of updates since the last reset."""
        return self._n

    @property
    def changepoint(self) -> int | None:
        """Estimated number of updates since reset at which the change began (the evidence
        starts with the next update); None before the first update. See :class:`RunningMinimum`.
        """
        return self._min.estimate if self._n else None

    def update(self, log_martingale: float) -> None:
        """Consume log S_n after a betting step."""
        x = float(log_martingale)
        if x != x:
            raise ValueError("log-martingale value must not be NaN")
        self._log_stat = self._step(x)
        self._n += 1
        if self._log_stat >= self._log_threshold:
            self._alarm = True

    @abstractmethod
    def _step(self, log_s: float) -> float:
        """Advance the internal state by one step; return the new log statistic."""

    def update_many(self, log_s: ArrayLike) -> int | None:
        """Consume a path of log S values; index (into ``log_s``) where ``alarm`` became True.

        None if the alarm did not switch on during this call (already on, or never reached).
        """
        path = as_log_path(log_s)
        if path.size == 0:
            return None
        stats = self._path(path)
        was_alarm = self._alarm
        self._n += path.size
        self._log_stat = float(stats[-1])
        hits = np.flatnonzero(stats >= self._log_threshold)
        if hits.size:
            self._alarm = True
        return None if was_alarm or hits.size == 0 else int(hits[0])

    @abstractmethod
    def _path(self, log_s: NDArray[np.float64]) -> NDArray[np.float64]:
        """Vectorised :meth:`_step` over a path; updates the internal state; log statistics."""

    def _base_state(self) -> dict[str, Any]:
        return {"n": self._n, "alarm": self._alarm, "log_stat": self._log_stat}

    def _load_base(self, state: dict[str, Any]) -> None:
        self._n, self._alarm = int(state["n"]), bool(state["alarm"])
        self._log_stat = float(state["log_stat"])

    @abstractmethod
    def _params(self) -> dict[str, Any]: ...

    def _extra_state(self) -> dict[str, Any]:
        return {"running_min": self._min.state()}

    def _load_extra(self, state: dict[str, Any]) -> None:
        self._min.load(state["running_min"])

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state restoring the rule bit for bit."""
        return new_state(self, params=self._params(), **self._base_state(), **self._extra_state())

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(**state["params"])
        obj._load_base(state)
        obj._load_extra(state)
        return obj


class RunLengthRule(AlarmRule):
    """An alarm rule whose threshold c > 1 bounds the mean run length to a false alarm (CUSUM,
    Shiryaev–Roberts): the threshold is its one parameter, and it may move between updates."""

    threshold: float = 10_000.0  # shadows the base property: the argument, stored verbatim

    def __init__(self, threshold: float = 10_000.0) -> None:
        self._log_threshold = check_threshold(threshold)
        self.threshold = threshold
        super().__init__()

    def set_threshold(self, threshold: float) -> None:
        """Alarm at ``threshold`` from the next update on (an alarm budget's threshold follows
        the stream's event rate: :mod:`monitor.core.martingales.alarms.budget`)."""
        self._log_threshold = check_threshold(threshold)
        self.threshold = threshold

    def _params(self) -> dict[str, Any]:
        return {"threshold": float(self.threshold)}


#: Slack (in nats) of the changepoint estimate: see :class:`RunningMinimum`.
CHANGEPOINT_SLACK = 0.25


class RunningMinimum:
    """min_{i<n} log S_i, its (latest) argmin and the changepoint estimate, with log S_0 = 0.

    The changepoint estimate is the last i < n at which the path was within
    :data:`CHANGEPOINT_SLACK` of its running minimum, log S_i ≤ min_{j≤i} log S_j + 0.25: the
    last time the CUSUM statistic log S_i − min_{j≤i} log S_j was near zero. With slack 0 it is
    Page's estimate, the last zero of the CUSUM statistic = the latest argmin (Page 1954,
    Section 4; Vovk et al. 2021, Section 4). A little slack matters for mixture martingales,
    whose log S drifts down like −½ log n under the null, so that the argmin lands wherever the
    flat pre-change path dipped lowest (≈ 90 events early on the median for a change at 500);
    the slack picks the end of the flat stretch instead (``docs/algorithms.md`` has the
    Monte Carlo figures). O(1) per step, like the minimum.
    """

    def __init__(self) -> None:
        self.prev = 0.0  # log S_{n-1}; the next candidate for the minimum
        self.minimum = math.inf
        self.argmin = 0
        self.estimate = 0

    def push(self, n: int, log_s: float) -> None:
        """Step n (0-based count before it): the candidate log S_n-1 joins, log_s is stored."""
        if self.prev <= self.minimum:
            self.minimum, self.argmin = self.prev, n
        if self.prev <= self.minimum + CHANGEPOINT_SLACK:
            self.estimate = n
        self.prev = log_s

    def push_many(self, n: int, log_s: NDArray[np.float64]) -> NDArray[np.float64]:
        """Vectorised :meth:`push`; returns the minimum in force at each step."""
        cand = np.concatenate([[self.prev], log_s[:-1]])
        mins = np.minimum.accumulate(np.concatenate([[self.minimum], cand]))[1:]
        idx = n + np.arange(cand.size)
        new = cand <= np.concatenate([[self.minimum], mins[:-1]])
        last = np.flatnonzero(new)
        if last.size:
            self.argmin = int(idx[last[-1]])
        near = np.flatnonzero(cand <= mins + CHANGEPOINT_SLACK)
        if near.size:
            self.estimate = int(idx[near[-1]])
        self.minimum, self.prev = float(mins[-1]), float(log_s[-1])
        return mins

    def state(self) -> dict[str, Any]:
        return {"prev": self.prev, "minimum": encode_float(self.minimum), "argmin": self.argmin,
                "estimate": self.estimate}

    def load(self, state: dict[str, Any]) -> None:
        self.prev = float(state["prev"])
        self.minimum = decode_float(state["minimum"], math.inf)
        self.argmin = int(state["argmin"])
        # states saved before the estimate existed: Page's estimate, the latest argmin
        self.estimate = int(state.get("estimate", self.argmin))


def check_threshold(threshold: float) -> float:
    if not 1.0 < float(threshold) < math.inf:
        raise ValueError(f"threshold must be a finite number > 1, got {threshold!r}")
    return math.log(float(threshold))
