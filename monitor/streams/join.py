"""Delayed-label join: predictions wait for their labels, and early labels wait for predictions.

Both waiting rooms are bounded by count and by event time. An entry pushed out by either bound is
*expired*: it is counted (``expired_predictions`` / ``expired_labels``), never silently dropped.
The whole store is part of the stream's checkpointed state.

A configuration update marks the predictions still waiting with the version they were made
under and that version's features (:meth:`LabelJoin.mark_made_under`): when the new version
monitors other features, the stream refuses their labels with a reason instead of feeding old
features to the new detectors (``monitor.streams.monitor``).

The store also remembers, within the same bounds, the ids of the pairs it joined
(:meth:`LabelJoin.processed`), so that a replay of dead letters can refuse an event the stream has
already processed (``monitor.cli.dead_letters``); live processing does not consult it.

The join's clock is event time, made robust to a single wrong timestamp: it is the median of
the last :data:`CLOCK_WINDOW` events' times (the lower median while fewer have been seen), and it
never goes back. One event stamped far in the future (a producer's clock bug) therefore cannot
expire every waiting prediction; a real jump in time moves the clock once most of the window has
jumped, i.e. after ⌈CLOCK_WINDOW/2⌉ events. Deterministic, so a replay expires exactly the same
entries.

A batch whose events cannot expire an entry by time (:meth:`LabelJoin.defer_expiry`: the clock
cannot pass any waiting entry's bound while they are added) moves the clock once, after its last
event (:meth:`LabelJoin.catch_up`), instead of once per event; the count bound is kept per event
all the same. The store and the clock end as they would one event at a time.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

Label = int | float | str

#: Event times the join's clock is the median of (see the module docstring).
CLOCK_WINDOW = 5


class Pending(NamedTuple):
    """A prediction waiting for its label (a named tuple: built once per event, so cheaply)."""

    event_id: str
    event_index: int
    ts: float
    features: tuple[float, ...]
    prediction: float | tuple[float, ...]
    #: The model's predicted scale of its error, when the event carried one.
    scale: float | None = None
    #: The configuration version the prediction was made under, when a later version is in
    #: force (set by :meth:`LabelJoin.mark_made_under`); None: the version in force.
    version: int | None = None
    #: True when the prediction had no ``ts`` (``ts`` is then the broker's or the ingest time):
    #: its conditional update has no event time for the alarm budget.
    untimed: bool = False
    #: Whether the covariate monitor found the inputs outside its calibration support when it
    #: scored the prediction (:meth:`LabelJoin.keep_outside`), read again when the label joins
    #: instead of scoring the inputs a second time; None: not known (not scored yet, a state
    #: written before the flags were kept, or made under an earlier configuration version).
    outside: bool | None = None


class Joined(NamedTuple):
    """A prediction with its label, ready for the conditional monitor."""

    pending: Pending
    label: Label


class LabelJoin:
    """Bounded store joining predictions and labels by event id.

    Parameters
    ----------
    max_pending
        Most predictions (and, separately, most early labels) held at once; the oldest is expired
        when a new one would exceed it.
    max_delay_seconds
        Entries older than this (the join's clock minus the entry's time) expire; the clock is
        the median of the last few events' times, never going back (module docstring).

    Examples
    --------
    >>> join = LabelJoin(max_pending=2, max_delay_seconds=60)
    >>> join.add_prediction(Pending("a", 0, 0.0, (1.0,), 2.0))
    >>> join.add_label("a", 3.0, ts=1.0)
    >>> [(j.pending.event_id, j.label) for j in join.drain()]
    [('a', 3.0)]
    >>> join.add_label("b", 1.0, ts=2.0)    # early label: held until its prediction arrives
    >>> join.pending_labels
    1
    """

    def __init__(self, max_pending: int = 100_000, max_delay_seconds: float = 7 * 24 * 3600.0):
        if max_pending < 1:
            raise ValueError("max_pending must be >= 1")
        if max_delay_seconds <= 0:
            raise ValueError("max_delay_seconds must be > 0")
        self.max_pending = max_pending
        self.max_delay_seconds = max_delay_seconds
        self._predictions: OrderedDict[str, Pending] = OrderedDict()
        self._labels: OrderedDict[str, tuple[Label, float]] = OrderedDict()
        self._ready: list[Joined] = []
        #: Ids of the pairs joined, with their prediction's time, kept within the same bounds as
        #: the waiting entries (count and event time): what :meth:`processed` knows beyond them.
        self._joined_ids: OrderedDict[str, float] = OrderedDict()
        #: The feature names of the versions marked predictions were made under (None: not
        #: known, a state written before the names were kept).
        self._made_under: dict[int, tuple[str, ...] | None] = {}
        self._recent: deque[float] = deque(maxlen=CLOCK_WINDOW)
        self._clock = float("-inf")
        #: The event times whose clock steps wait for :meth:`catch_up` (None: not deferred),
        #: and the bound no entry may be earlier than meanwhile.
        self._deferred: list[float] | None = None
        self._horizon = -math.inf
        self.expired_predictions = 0
        self.expired_labels = 0
        self.joined = 0

    @property
    def pending_predictions(self) -> int:
        return len(self._predictions)

    @property
    def pending_labels(self) -> int:
        return len(self._labels)

    @property
    def predictions(self) -> Mapping[str, Pending]:
        """The predictions waiting for their labels, by event id, oldest first: a live,
        read-only view (a batch binds it once and reads it per event; :meth:`load_state`
        replaces it)."""
        return self._predictions

    @property
    def ready(self) -> Sequence[Joined]:
        """The pairs joined and not drained yet, in the order they were completed: a live,
        read-only view (empty most of the time; a batch binds it once and tests it per event
        before calling :meth:`drain`)."""
        return self._ready

    def has_prediction(self, event_id: str) -> bool:
        return event_id in self._predictions

    def processed(self, kind: str, event_id: str) -> bool:
        """Whether an event of ``kind`` (``prediction`` or ``label``) with ``event_id`` is known
        to the store: waiting for its counterpart, or joined within the store's bounds.

        >>> join = LabelJoin(max_pending=1)
        >>> join.add_prediction(Pending("a", 0, 0.0, (1.0,), 2.0))
        >>> join.processed("prediction", "a"), join.processed("label", "a")
        (True, False)
        >>> join.add_label("a", 3.0, ts=1.0)
        >>> join.processed("prediction", "a"), join.processed("label", "a")
        (True, True)
        >>> join.add_prediction(Pending("b", 1, 2.0, (1.0,), 2.0))
        >>> join.add_label("b", 3.0, ts=3.0)  # pushes "a" out (max_pending=1)
        >>> join.processed("label", "a"), join.processed("label", "b")
        (False, True)
        """
        waiting = self._predictions if kind == "prediction" else self._labels
        return event_id in waiting or event_id in self._joined_ids

    def waiting(self, event_id: str) -> Pending | None:
        """The prediction ``event_id`` waiting for its label, if any."""
        return self._predictions.get(event_id)

    def mark_made_under(self, version: int, feature_names: tuple[str, ...] | None) -> int:
        """At a configuration update: mark the waiting predictions not marked yet as made under
        ``version``, whose features are ``feature_names``; returns how many were marked.

        >>> join = LabelJoin()
        >>> join.add_prediction(Pending("a", 0, 0.0, (1.0, 2.0), 0.5))
        >>> join.mark_made_under(1, ("x0", "x1")), join.mark_made_under(2, ("x0",))
        (1, 0)
        >>> join.made_under("a"), join.made_under("b")
        ((1, ('x0', 'x1')), None)
        """
        predictions = self._predictions
        marked = 0
        for key, pending in predictions.items():
            if pending.version is None:
                # the support flag is the old detectors': the new ones score the inputs again
                predictions[key] = pending._replace(version=version, outside=None)
                marked += 1
        if marked:
            self._made_under[version] = feature_names
        return marked

    def keep_outside(self, event_ids: Sequence[str], flags: Sequence[bool]) -> None:
        """Keep each prediction's support flag with it while it waits for its label (the ids
        not waiting any more, joined or expired, are skipped).

        >>> join = LabelJoin()
        >>> join.add_prediction(Pending("a", 0, 0.0, (9.0,), 2.0))
        >>> join.keep_outside(["a", "b"], [True, False])
        >>> join.waiting("a").outside, join.waiting("b")
        (True, None)
        """
        predictions = self._predictions
        for event_id, flag in zip(event_ids, flags, strict=True):
            pending = predictions.get(event_id)
            if pending is not None:
                predictions[event_id] = pending._replace(outside=flag)

    @property
    def marked(self) -> bool:
        """Whether a configuration update marked predictions (some may still wait)."""
        return bool(self._made_under)

    def made_under(self, event_id: str) -> tuple[int, tuple[str, ...] | None] | None:
        """The version (and its feature names) a waiting prediction was made under, when a
        configuration update marked it; else None."""
        pending = self._predictions.get(event_id)
        if pending is None or pending.version is None:
            return None
        return pending.version, self._made_under.get(pending.version)

    def add_prediction(self, pending: Pending) -> None:
        """Hold a prediction, or join it at once with an early label."""
        early = self._labels.pop(pending.event_id, None)
        if early is not None:
            self._join(pending, early[0])
        else:
            self._predictions[pending.event_id] = pending
        self._tick(pending.ts)

    def add_label(self, event_id: str, label: Label, ts: float) -> None:
        """Join a label with its waiting prediction, or hold it until the prediction arrives."""
        pending = self._predictions.pop(event_id, None)
        if pending is not None:
            self._join(pending, label)
        else:
            self._labels[event_id] = (label, ts)
        self._tick(ts)

    def defer_expiry(self, lowest: float, highest: float, events: int) -> bool:
        """Whether up to ``events`` events whose times lie in [``lowest``, ``highest``] can
        expire an entry by its count bound only; if so, the clock's steps wait for
        :meth:`catch_up` (due after the last of them) while the count bound is kept at each
        event, as one at a time.

        The clock is a median of event times, none above ``highest`` nor the recent times it
        holds, and it never goes back: so the bound no entry reaches while the batch runs is
        ``max(clock, recent, highest) - max_delay_seconds``. Time expires an entry only when it
        comes first in its store; an event removes at most two entries of a store (a join and
        the count bound), so only the first ``2 * events + 1`` entries of each can come first,
        or an entry the batch adds. A new entry's time is the batch's, or for a pair joined,
        that of its prediction: one earlier than the bound (a waiting prediction's time out of
        order) ends the deferral there, the clock caught up and moved at each event after.

        >>> join = LabelJoin(max_pending=10, max_delay_seconds=60)
        >>> join.add_prediction(Pending("a", 0, 0.0, (1.0,), 2.0))
        >>> join.defer_expiry(1.0, 59.0, 3)  # the clock cannot pass 59 - 60 < 0.0
        True
        >>> join.add_label("a", 3.0, ts=59.0); join.catch_up(); join.clock  # median of 0, 59
        0.0
        >>> join.defer_expiry(60.0, 61.0, 3)  # "a" joined at 0.0: the bound 61 - 60 may pass it
        False
        """
        assert self._deferred is None, "catch_up() was not called after the last batch"
        cap, predictions, labels, joined = (self.max_pending, self._predictions, self._labels,
                                            self._joined_ids)
        if len(predictions) > cap or len(labels) > cap or len(joined) > cap:
            return False
        horizon = max(self._clock, highest, *self._recent) - self.max_delay_seconds
        first = 2 * events + 1
        if lowest < horizon or _earliest(predictions, _pts, first) < horizon \
                or _earliest(labels, _lts, first) < horizon \
                or min(islice(joined.values(), first), default=math.inf) < horizon:
            return False
        self._deferred, self._horizon = [], horizon
        return True

    def catch_up(self) -> None:
        """The clock's steps deferred by :meth:`defer_expiry`, at once (nothing expires: that
        is what it checked)."""
        ticks, self._deferred = self._deferred, None
        if not ticks:
            return
        recent = self._recent
        if len(ticks) < 16:  # few: as one at a time
            for ts in ticks:
                recent.append(ts)
                self._advance_clock()
            return
        times = np.array([*recent, *ticks], np.float64)
        first = len(recent)
        clock = self._clock
        for end in range(first, min(CLOCK_WINDOW - 1, times.size)):  # windows not full yet
            clock = max(clock, float(np.sort(times[: end + 1])[end // 2]))
        full = sliding_window_view(times[max(0, first - CLOCK_WINDOW + 1):], CLOCK_WINDOW)
        clock = max(clock, float(np.sort(full, axis=1)[:, (CLOCK_WINDOW - 1) // 2].max()))
        self._clock = clock
        recent.extend(ticks)

    def drain(self) -> list[Joined]:
        """Joined pairs in the order they were completed, removed from the store."""
        ready = self._ready.copy()
        self._ready.clear()  # in place: :attr:`ready` stays a view of the store
        return ready

    def _join(self, pending: Pending, label: Label) -> None:
        if self._deferred is not None and pending.ts < self._horizon:
            self.catch_up()  # the pair may come first among the joined ids, and expire: per event
        self._ready.append(Joined(pending, label))
        self.joined += 1
        self._joined_ids[pending.event_id] = pending.ts

    @property
    def clock(self) -> float:
        """The join's event-time clock (-inf before the first event)."""
        return self._clock

    def _tick(self, ts: float) -> None:
        """An event at ``ts`` was added: the clock's step and what expires (by count only, the
        step deferred, while :meth:`defer_expiry` holds)."""
        deferred = self._deferred
        if deferred is None:
            self._expire(ts)
            return
        deferred.append(ts)
        cap = self.max_pending  # at most one store grew, by one: as _evict would
        if len(self._predictions) > cap:
            self._predictions.popitem(last=False)
            self.expired_predictions += 1
        if len(self._labels) > cap:
            self._labels.popitem(last=False)
            self.expired_labels += 1
        if len(self._joined_ids) > cap:
            self._joined_ids.popitem(last=False)

    def _advance_clock(self) -> None:
        """The clock after the last of :attr:`_recent`: their median, if it is later."""
        recent = sorted(self._recent)
        median = recent[(len(recent) - 1) // 2]
        if median > self._clock:
            self._clock = median

    def _expire(self, ts: float) -> None:
        self._recent.append(ts)
        self._advance_clock()
        horizon = self._clock - self.max_delay_seconds
        # Most events expire nothing: look at the oldest entries before calling _evict.
        predictions, labels, cap = self._predictions, self._labels, self.max_pending
        if predictions and (len(predictions) > cap or _pts(_oldest(predictions)) < horizon):
            self.expired_predictions += _evict(predictions, cap, horizon, _pts)
        if labels and (len(labels) > cap or _lts(_oldest(labels)) < horizon):
            self.expired_labels += _evict(labels, cap, horizon, _lts)
        joined = self._joined_ids
        if joined and (len(joined) > cap or _oldest(joined) < horizon):
            _evict(joined, cap, horizon, float)  # forgotten, not expired: nothing waited

    def state_dict(self) -> dict[str, Any]:
        predictions = self._predictions.values()
        state: dict[str, Any] = {
            "version": 2,
            # a sixth item, the scale, only when there is one, a seventh, the version a
            # prediction was made under, only when marked, and an eighth, true, only for a
            # prediction without ts: older readers see the same rows
            "predictions": [
                [p.event_id, p.event_index, p.ts, list(p.features), _plain(p.prediction)]
                + ([] if p.scale is None and p.version is None and not p.untimed
                   else [p.scale])
                + ([] if p.version is None and not p.untimed else [p.version])
                + ([True] if p.untimed else [])
                for p in predictions
            ],
            "labels": [[k, v[0], v[1]] for k, v in self._labels.items()],
            "counts": [self.expired_predictions, self.expired_labels, self.joined],
            "recent": list(self._recent),
            "clock": self._clock if self._clock != float("-inf") else None,
        }
        if any(p.outside is not None for p in predictions):  # no key without: as before
            # one byte per waiting prediction, in their order: 1 outside, 0 inside, 2 not known
            state["outside"] = np.fromiter(
                (2 if p.outside is None else int(p.outside) for p in predictions),
                np.uint8, len(predictions))
        if self._joined_ids:  # no key without: the state of a stream without labels is as before
            # ids as one list and times as one array (binary in the blob): up to max_pending
            # entries, written at every checkpoint
            joined = self._joined_ids
            state["joined"] = {"ids": list(joined),
                               "ts": np.fromiter(joined.values(), np.float64, len(joined))}
        if self._made_under:  # the versions a waiting prediction was made under (no key without)
            used = {p.version for p in predictions if p.version is not None}
            made_under = [[version, None if names is None else list(names)]
                          for version, names in sorted(self._made_under.items()) if version in used]
            if made_under:
                state["made_under"] = made_under
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("version") not in (1, 2):
            raise ValueError(f"unsupported label-join state version {state.get('version')!r}")
        self._predictions = OrderedDict(
            (row[0], Pending(row[0], row[1], row[2], tuple(row[3]), _tuple(row[4]),
                             row[5] if len(row) > 5 else None, row[6] if len(row) > 6 else None,
                             len(row) > 7 and bool(row[7])))
            for row in state["predictions"]
        )
        if "outside" in state:  # a state written before the flags were kept: none known
            predictions = self._predictions
            for key, flag in zip(list(predictions), np.asarray(state["outside"]).tolist(),
                                 strict=True):
                if flag != 2:
                    predictions[key] = predictions[key]._replace(outside=bool(flag))
        self._made_under = {
            int(version): None if names is None else tuple(names)
            for version, names in state.get("made_under", ())
        }
        self._labels = OrderedDict((k, (label, ts)) for k, label, ts in state["labels"])
        # a state written before the joined ids were kept knows only the waiting entries
        joined = state.get("joined", {"ids": (), "ts": ()})
        self._joined_ids = OrderedDict(zip(joined["ids"], map(float, joined["ts"]), strict=True))
        self.expired_predictions, self.expired_labels, self.joined = state["counts"]
        # version 1 kept no clock: start it afresh (it only delays expiry by a few events)
        self._recent = deque(state.get("recent", ()), maxlen=CLOCK_WINDOW)
        clock = state.get("clock")
        self._clock = float("-inf") if clock is None else float(clock)
        self._deferred = None
        self._ready.clear()


def _earliest(store: OrderedDict[str, Any], ts_of: Any, first: int) -> float:
    """The earliest time among the first ``first`` entries of ``store``."""
    return min(map(ts_of, islice(store.values(), first)), default=math.inf)


def _oldest(store: OrderedDict[str, Any]) -> Any:
    return next(iter(store.values()))


def _pts(entry: Pending) -> float:
    return entry.ts


def _lts(entry: tuple[Label, float]) -> float:
    return entry[1]


def _evict(store: OrderedDict[str, Any], cap: int, horizon: float, ts_of: Any) -> int:
    """Expire the oldest entries beyond ``cap`` and every entry older than ``horizon``."""
    expired = 0
    while len(store) > cap:
        store.popitem(last=False)
        expired += 1
    while store:
        key = next(iter(store))
        if ts_of(store[key]) >= horizon:
            break
        del store[key]
        expired += 1
    return expired


def _plain(prediction: float | tuple[float, ...]) -> float | list[float]:
    return list(prediction) if isinstance(prediction, tuple) else prediction


def _tuple(prediction: float | list[float]) -> float | tuple[float, ...]:
    return tuple(prediction) if isinstance(prediction, list) else prediction
