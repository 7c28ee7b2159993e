"""Alarm budgets: a threshold that keeps a false-alarm budget stated in time (``30d``) or in
events, for CUSUM / Shiryaev–Roberts rules.

The proofs are in ``docs/algorithms.md`` ("Alarm budgets"); in short, for one detector with the
Shiryaev–Roberts statistic R_n (R_n − n a martingale under the null, Pollak 1987; an
e-detector in the sense of Shin, Ramdas & Rinaldo 2023):

- a threshold A gives E[τ] ≥ A (optional stopping) and, by Doob's maximal inequality on the
  non-negative submartingale R_n (E[R_m] = m), P(a false alarm within m updates) ≤ m / A;
- a budget of T seconds at a rate of r updates per second is the threshold A = T·r, so that
  P(a false alarm within t seconds) ≤ r·t / (T·r) = t / T;
- a stream with ``share`` detectors gives each ``share``·T·r_i (r_i its own update rate): by the
  union bound the stream keeps P(a false alarm within t) ≤ t / T.

CUSUM's statistic is at most SR's on every path, so every statement holds for CUSUM too.
A ``floor`` (the threshold is max(floor, share·T·r̂)) only raises the threshold, so every
statement holds with it: the stream is then held to fewer false alarms than the budget allows.

Warm-up and updates without an event time run on the *event-count threshold*
max(floor, share·N), N the budget's ``events``: by the same bound, the B warm-up updates of a
detector raise a false alarm with probability at most B / (share·N), so a stream keeps
P(a false alarm within t) ≤ B/N + t/T (docs/algorithms.md, "Warm-up and updates without an
event time").
"""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.martingales.state import check_state, new_state

__all__ = ["DEFAULT_EVENTS", "MAX_RATE", "EventRateThreshold"]

#: The highest event rate a budget is stated for (events per second): a measured rate is capped
#: at it.
MAX_RATE = 100_000.0
#: A time budget's event-count part N (``alarm.events``) when none is given: warm-up and updates
#: without an event time run on the threshold max(floor, share·N), 10⁵ for a stream's two
#: detectors.
DEFAULT_EVENTS = 50_000

class EventRateThreshold:
    """The threshold share·T·r̂ of one detector, r̂ its update rate measured on event time.

    Updates are counted in blocks of ``block``; a complete block's rate is
    (block − 1) / (max ts − min ts) over its updates, capped at ``max_rate`` (a block whose
    updates share one ts counts at ``max_rate``). r̂ is the highest block rate among the blocks
    completed within the trailing ``horizon`` of event time (the last complete block always
    counts), kept in ``buckets`` sub-windows of the horizon (bounded memory). So the threshold

    - is *predictable*: the threshold of update n depends only on the ts of updates before the
      block that holds n, and changes only at multiples of ``block`` updates — per-event and
      batch updates, and a replay of the same events, see the same thresholds;
    - rises within one block of a rate increase and falls only when a faster block leaves the
      horizon (at most ``horizon`` × (1 + 1/buckets) later);
    - during warm-up (before the first complete block) is the event-count threshold
      max(floor, share·``events``), which bounds the warm-up's false alarms by
      ``block`` / (share·``events``) whatever the rate;
    - gives an update without an event time (a ts of NaN) the event-count threshold too, and
      leaves it out of the blocks: a stream without event times runs on an event-count budget.

    Parameters
    ----------
    seconds
        The budget T: on a stream without change, P(a false alarm within t) ≤ t / T.
    share
        How many detectors share the budget (each gets share·T·r̂).
    floor
        The lowest threshold it sets (default 2: a threshold must exceed 1): the threshold is
        max(floor, share·T·r̂). The stream configuration's ``min_threshold``.
    events
        N, the event-count part of the budget: the threshold of warm-up and of updates without
        an event time is max(floor, share·N).
    max_rate, block, horizon, buckets
        The rate cap (events/s), the block size (updates), the trailing horizon (s) and its
        number of sub-windows.

    Examples
    --------
    >>> budget = EventRateThreshold(seconds=3600.0, share=2, block=4)
    >>> ts = np.arange(12) / 8.0  # 8 events per second
    >>> budget.thresholds(ts).tolist()  # warm-up at 2 · 50 000 events, then 2 · 3600 s · 8/s
    [100000.0, 100000.0, 100000.0, 100000.0, 57600.0, 57600.0, 57600.0, 57600.0, 57600.0, \
57600.0, 57600.0, 57600.0]
    >>> floored = EventRateThreshold(seconds=3600.0, share=2, block=4, floor=100_000.0)
    >>> floored.thresholds(ts).tolist()[3:6]  # max(100 000, 57 600)
    [100000.0, 100000.0, 100000.0]
    >>> budget.thresholds([12.0, math.nan]).tolist()  # no event time: the event-count threshold
    [57600.0, 100000.0]
    """

    def __init__(
        self,
        seconds: float,
        share: int = 1,
        max_rate: float = MAX_RATE,
        block: int = 256,
        horizon: float = 86_400.0,
        buckets: int = 8,
        floor: float = 2.0,
        events: int = DEFAULT_EVENTS,
    ) -> None:
        for name, value in (("seconds", seconds), ("max_rate", max_rate), ("horizon", horizon)):
            if not (isinstance(value, int | float) and 0 < value < math.inf):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        for name, value, low in (("share", share, 1), ("block", block, 2), ("buckets", buckets, 1),
                                 ("events", events, 1)):
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(floor, int | float) and 2.0 <= floor < math.inf):
            raise ValueError(f"floor must be a finite number >= 2, got {floor!r}")
        self.floor = float(floor)
        self.seconds = seconds
        self.share = share
        self.max_rate = max_rate
        self.block = block
        self.horizon = horizon
        self.buckets = buckets
        self.events = events
        self._count = 0  # updates in the current block
        self._lo, self._hi = math.inf, -math.inf  # ts range of the current block
        self._last_rate: float | None = None  # rate of the last complete block
        self._bucket_max: dict[int, float] = {}  # bucket number -> highest block rate in it
        self._threshold = self.event_threshold

    @property
    def threshold(self) -> float:
        """The threshold of the next update with an event time."""
        return self._threshold

    @property
    def event_threshold(self) -> float:
        """The event-count threshold max(floor, share·events): warm-up's, and that of every
        update without an event time."""
        return max(self.floor, float(self.share * self.events))

    @property
    def warming_up(self) -> bool:
        """True until the first block of updates with event times is complete."""
        return self._last_rate is None

    @property
    def rate(self) -> float | None:
        """r̂: the rate the threshold follows (None during warm-up)."""
        return None if self._last_rate is None else self._threshold_rate()

    def thresholds(self, ts: ArrayLike) -> NDArray[np.float64]:
        """The threshold of each of the next updates, with event times ``ts`` (seconds; NaN:
        an update without an event time), in order; then counts them."""
        arr = np.asarray(ts, dtype=np.float64).reshape(-1)
        untimed = np.isnan(arr)
        if np.isinf(arr).any():
            raise ValueError("event times must be finite numbers of seconds (NaN: none)")
        if not untimed.any():
            return self._timed_thresholds(arr)
        out = np.full(arr.size, self.event_threshold)
        out[~untimed] = self._timed_thresholds(arr[~untimed])
        return out

    def _timed_thresholds(self, arr: NDArray[np.float64]) -> NDArray[np.float64]:
        out = np.empty(arr.size)
        i = 0
        while i < arr.size:
            take = min(self.block - self._count, arr.size - i)
            out[i : i + take] = self._threshold
            part = arr[i : i + take]
            self._lo, self._hi = min(self._lo, float(part.min())), max(self._hi, float(part.max()))
            self._count += take
            i += take
            if self._count == self.block:
                self._close_block()
        return out

    def _close_block(self) -> None:
        span = self._hi - self._lo
        rate = self.max_rate if span <= 0 else min(self.max_rate, (self.block - 1) / span)
        width = self.horizon / self.buckets
        now = math.floor(self._hi / width)
        self._bucket_max[now] = max(rate, self._bucket_max.get(now, 0.0))
        for old in [b for b in self._bucket_max if b < now - self.buckets]:
            del self._bucket_max[old]
        self._last_rate = rate
        self._count, self._lo, self._hi = 0, math.inf, -math.inf
        self._threshold = self._from_rate(self._threshold_rate())

    def _threshold_rate(self) -> float:
        assert self._last_rate is not None
        return max(self._last_rate, *self._bucket_max.values())

    def _from_rate(self, rate: float) -> float:
        # A threshold must exceed 1; below 2 a budget promises less than one update anyway.
        return max(self.floor, self.share * self.seconds * rate)

    # ------------------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state restoring the estimator bit for bit."""
        return new_state(
            self,
            params={
                "seconds": self.seconds, "share": self.share, "max_rate": self.max_rate,
                "block": self.block, "horizon": self.horizon, "buckets": self.buckets,
                "floor": self.floor, "events": self.events,
            },
            count=self._count,
            lo=None if self._count == 0 else self._lo,
            hi=None if self._count == 0 else self._hi,
            last_rate=self._last_rate,
            buckets_max=[[b, r] for b, r in sorted(self._bucket_max.items())],
            threshold=self._threshold,
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        obj = cls(**state["params"])
        obj._count = int(state["count"])
        obj._lo = math.inf if state["lo"] is None else float(state["lo"])
        obj._hi = -math.inf if state["hi"] is None else float(state["hi"])
        obj._last_rate = None if state["last_rate"] is None else float(state["last_rate"])
        obj._bucket_max = {int(b): float(r) for b, r in state["buckets_max"]}
        # A state written before the event-count warm-up (its params have no ``events``) adopts
        # it: while warming up, its stored threshold was the one of max_rate.
        obj._threshold = obj.event_threshold if obj.warming_up else float(state["threshold"])
        return obj
