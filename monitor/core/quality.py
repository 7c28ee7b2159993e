"""Data-quality monitor: anytime-valid tests of per-event 0/1 indicators (a feature missing, an
unseen category, a value out of the calibration range) against their reference rates
(docs/tabular.md, "Data-quality monitor").

**p-values.** Indicator j's score is s ∈ {0, 1} (1 = fired, the stranger value); its reference
is the calibration's counts (n, o ones), online: each monitored event joins it after its
p-value. The conformal p-value (ALRW 2nd ed., Section 2.2; ties counted in full) is

    p = a = (o + 1)/(n + 1)   if s = 1,        p = 1   if s = 0.

It is the smoothed p-value p̃ = (#{> s} + U·#{= s, itself included})/(n + 1) with U = 1, so
p ≥ p̃ on every path, and p̃ is exactly uniform, i.i.d. over the events of one indicator, under
exchangeability of the calibration and the stream (ALRW Thm 11.1). The monitor uses p, not p̃:
it needs no random numbers, and an indicator that never fires has p = 1 on every event.

**Bets.** A grid of G = 40 fixed bets, non-increasing in p, each with ∫₀¹ f dp = 1:

    f_g(p) = 1 + κ_g·(1[p ≤ c_g]/c_g − 1),   c ∈ {2⁻¹, …, 2⁻¹⁰},  κ_g = min(½, m/(1/c − 1)),
    m ∈ {1, 3, 7, 15}:

a share κ of the capital on the event {p ≤ c} (probability c under the null), which a fired
indicator wins when its reference rate a is at most c; a win multiplies the capital by 1 + m
(the Kelly bet for a rate m + 1 times c, for small c). The product S_{j,g} = Π_t f_g(p_jt) is,
with p̃ in place of p, a test martingale (ALRW Section 9.1); a grid over bet sizes is the
betting approach to a bounded mean of Waudby-Smith & Ramdas (JRSSB 2024, Section 5).

**Detectors.** Per bet, the rule's statistic of S_{j,g}: Ville S (no restart), CUSUM
C_n = f_n·max(C_{n−1}, 1) = max_{i<n} S_n/S_i and Shiryaev–Roberts R_n = f_n·(R_{n−1} + 1) =
Σ_{i<n} S_n/S_i (Vovk et al. 2021, eqs. (5), (6)); per indicator their average over the bets,
D_j = (1/G)·Σ_g stat_{j,g} (an average of test martingales is one, Vovk & Wang, Ann. Statist.
2021, Section 2; of e-detectors, an e-detector, Shin, Ramdas & Rinaldo 2023). The stream alarms
when max_j D_j ≥ k·A, A the threshold (1/α for Ville): Bonferroni over the k indicators.

**Guarantees** (under exchangeability of each indicator's calibration and stream values; any
dependence between indicators). With p̃, R̃_j − n is a martingale (Pollak 1987): E[R̃_j,m] = m
and by Doob's inequality P(max_{n≤m} R̃_j,n ≥ kA) ≤ m/(kA). The statistics are non-decreasing in
each factor and f_g(p) ≤ f_g(p̃) (f non-increasing, p ≥ p̃), so D_j ≤ D̃_j on every path, and the
union bound over j gives P(a false alarm within m events) ≤ m/A for SR — for CUSUM too, since
C ≤ R — and P(a false alarm) ≤ α for Ville (Ville's inequality on each D̃_j at k/α). So a time
budget's threshold A = T·r̂ (:class:`~monitor.core.martingales.alarms.EventRateThreshold`, the
``thresholds`` of :meth:`DataQualityMonitor.update_batch`) keeps P(a false alarm within t) ≤ t/T.
The indicators need their own filtration each: the p-values of different indicators of one
event are dependent, and no combination needing a common filtration (an average of the D_j) is
claimed. An indicator that never fires has p = 1, every bet loses, and
stat_{j,g} ≤ (1 − κ_g)/κ_g (SR; CUSUM and Ville less): D_j never exceeds :data:`SILENT_BOUND`
(≈ 78), so it never raises an alarm at any threshold k·A above that.

*Why not the smoothed p̃ with bets tuned to the counts* (``1[p̃ ≤ a]/a``): a is not a function of
the past p-values, and given the calibration counts the next p̃ is not uniform; and with p̃ an
indicator that never fired is uniform noise (p̃ = U), so it would raise false alarms like any.

**Diagnosis.** At an alarm, the driving indicator's strongest bet gives the changepoint: the
last update after which its CUSUM statistic was within :data:`CHANGEPOINT_SLACK` nats of zero
(Page's estimate with the slack of :class:`~monitor.core.martingales.alarms.base.RunningMinimum`).
Each indicator reports log D_j (``log_e``), its own changepoint and its rate since then.

**Re-baselining** as the other monitors (:mod:`monitor.core.detectors.base`): after an alarm
the next ``rebaseline`` events' counts become the fresh reference, then the statistics restart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.detectors.base import (
    MONITORING,
    STOPPED,
    WARMING_UP,
    AlarmEvent,
    Lifecycle,
    check_choice,
    check_lifecycle,
    check_test_params,
)
from monitor.core.martingales.alarms.base import CHANGEPOINT_SLACK
from monitor.core.martingales.jit import jit
from monitor.core.martingales.state import check_state, new_state

__all__ = [
    "BET_GAINS",
    "BET_LEVELS",
    "MAX_BET",
    "QUALITY_RATES",
    "SILENT_BOUND",
    "DataQualityMonitor",
    "QualityAlarm",
    "bet_grid",
    "binary_p_values",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: The indicator kinds of the design (docs/tabular.md).
QUALITY_RATES = ("missing", "unseen", "out_of_range")
#: The levels c of the bets 1[p ≤ c]/c, the gains m of a win and the largest share κ bet.
BET_LEVELS = tuple(float(c) for c in 2.0 ** -np.arange(1, 11))
BET_GAINS = (1.0, 3.0, 7.0, 15.0)
MAX_BET = 0.5
_RULES = {"ville": 0, "cusum": 1, "shiryaev_roberts": 2}


def bet_grid() -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per bet g: the level c_g, its factor on a win 1 + κ(1/c − 1) and on a loss 1 − κ."""
    c = np.repeat(np.asarray(BET_LEVELS), len(BET_GAINS))
    gain = np.tile(np.asarray(BET_GAINS), len(BET_LEVELS))
    kappa = np.minimum(MAX_BET, gain / (1.0 / c - 1.0))
    return c, 1.0 + kappa * (1.0 / c - 1.0), 1.0 - kappa


_GRID = bet_grid()
N_BETS = _GRID[0].size
#: The largest D_j of an indicator that never fires (SR: the mean of the fixed points
#: (1 − κ)/κ of R ← (1 − κ)(R + 1)); CUSUM and Ville stay at or below 1.
SILENT_BOUND = float(np.mean(_GRID[2] / (1.0 - _GRID[2])))


def binary_p_values(scores: NDArray[np.bool_], n: IntArray, ones: IntArray) -> FloatArray:
    """Conformal p-values (n_events, k) of 0/1 scores against online count references: a fired
    indicator gets (o + 1)/(m + 1), o ones among the m reference scores before it, else 1.
    ``n``, ``ones`` (k,) are the counts before the first event."""
    s = scores.astype(np.int64)
    o = ones[None, :] + np.cumsum(s, axis=0) - s
    m = n[None, :] + np.arange(s.shape[0])[:, None]
    return np.where(s == 1, (o + 1.0) / (m + 1.0), 1.0)


@jit
def _detect(
    rule: int, p: FloatArray, fired: NDArray[np.bool_], limits: FloatArray, levels: FloatArray,
    win: FloatArray, lose: FloatArray, stat: FloatArray, cusum: FloatArray, cp: IntArray,
    cp_ones: IntArray, ones: IntArray, count: int, slack: float,
) -> tuple[int, int]:
    """Step every (indicator, bet) statistic over p (n, k) in place until max_j Σ_g stat_{j,g}
    reaches ``limits[t]`` (= G·k·A_t); returns (updates used, alarming indicator or −1).
    ``cp``/``cp_ones``: per (j, g) the update count at the last near-zero of its CUSUM and the
    indicator's ones then; ``ones`` (k,) is advanced, ``count`` is the updates before p."""
    n, k = p.shape
    n_bets = levels.size
    for t in range(n):
        count += 1
        hit = -1
        top = 0.0
        for j in range(k):
            pj = p[t, j]
            if fired[t, j]:
                ones[j] += 1
            total = 0.0
            for g in range(n_bets):
                f = win[g] if pj <= levels[g] else lose[g]
                c = f * max(cusum[j, g], 1.0)
                cusum[j, g] = c
                if c <= slack:
                    cp[j, g] = count
                    cp_ones[j, g] = ones[j]
                if rule == 0:
                    s = f * stat[j, g]
                elif rule == 1:
                    s = c
                else:
                    s = f * (stat[j, g] + 1.0)
                stat[j, g] = s
                total += s
            if total >= limits[t] and total > top:
                top, hit = total, j
        if hit >= 0:
            return t + 1, hit
    return n, -1


@dataclass(frozen=True, slots=True)
class QualityAlarm:
    """One data-quality alarm: the :class:`AlarmEvent` and the indicators' evidence, dicts
    ``{"feature", "rate", "calibration_rate", "rate_after", "log_e", "changepoint_index",
    "alarmed"}`` sorted by ``log_e`` descending (the first drives the alarm)."""

    event: AlarmEvent
    indicators: tuple[dict[str, Any], ...]

    def evidence(self) -> dict[str, Any]:
        """The alarm's evidence in the shape of docs/tabular.md."""
        return {"indicators": [dict(i) for i in self.indicators],
                "changepoint_index": self.event.changepoint,
                "log_statistic": self.event.log_statistic,
                "log_threshold": self.event.log_threshold}

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event.to_json(), "indicators": [dict(i) for i in self.indicators]}

    @classmethod
    def from_json(cls, state: dict[str, Any]) -> QualityAlarm:
        return cls(AlarmEvent(**state["event"]), tuple(dict(i) for i in state["indicators"]))


#: ``on_alarm(i, alarm)`` of ``update_batch``: batch position and the alarm it raised.
QualityCallback = Callable[[int, QualityAlarm], None]


class DataQualityMonitor(Lifecycle["QualityAlarm"]):
    """Anytime-valid monitor of k 0/1 data-quality indicators against their reference rates.

    Parameters
    ----------
    indicators
        k pairs (feature, rate), rate one of :data:`QUALITY_RATES`: the columns of the
        indicator matrices given to :meth:`update_batch`.
    reference_n, reference_ones
        Per indicator, the calibration events it was counted on and how many fired (k,).
    rule, threshold, alpha
        ``ville`` alarms at max_j D_j ≥ k/alpha; ``cusum`` and ``shiryaev_roberts`` at
        max_j D_j ≥ k·threshold (P(a false alarm within m events) ≤ m/threshold).
    rebaseline
        Events whose counts become the fresh reference after an alarm (0 = stop).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> monitor = DataQualityMonitor([("age", "missing"), ("city", "unseen")],
    ...                              reference_n=[1000, 500], reference_ones=[50, 5],
    ...                              threshold=1000.0)
    >>> before = rng.uniform(size=(400, 2)) < [0.05, 0.01]
    >>> after = rng.uniform(size=(200, 2)) < [0.25, 0.01]  # age goes missing more often at 400
    >>> monitor.update_batch(np.vstack([before, after]))
    >>> alarm = monitor.last_alarms[0]
    >>> alarm.event.index, alarm.event.changepoint, alarm.indicators[0]["feature"]
    (419, 413, 'age')

    References
    ----------
    Vovk, Gammerman, Shafer. *Algorithmic Learning in a Random World*, 2nd ed. (2022).
    Waudby-Smith, Ramdas. Estimating means of bounded random variables by betting. JRSSB 86
    (2024). Vovk, Wang. E-values: calibration, combination and applications. Ann. Statist. 49
    (2021). Shin, Ramdas, Rinaldo. E-detectors: a nonparametric framework for sequential change
    detection. NEJSDS (2023).
    """

    def __init__(
        self,
        indicators: Sequence[tuple[str, str]],
        reference_n: ArrayLike,
        reference_ones: ArrayLike,
        rule: str = "shiryaev_roberts",
        threshold: float = 10_000.0,
        alpha: float = 0.01,
        rebaseline: int = 300,
    ) -> None:
        check_test_params("composite_jumper", rule, threshold, alpha)
        check_lifecycle(rebaseline, None, None)
        self.indicators = _check_indicators(indicators)
        n, ones = _check_counts(reference_n, reference_ones, len(self.indicators))
        self.rule = rule
        self.threshold = threshold
        self.alpha = alpha
        self.rebaseline = rebaseline
        self._phase = MONITORING
        self._n_seen = 0
        self._n_alarms = 0
        self._last_alarms: tuple[QualityAlarm, ...] = ()
        self._frozen: AlarmEvent | None = None
        self._warmup = np.zeros(len(self.indicators), np.int64)
        self._warmup_n = 0
        self._start(n, ones)

    def _start(self, n: IntArray, ones: IntArray) -> None:
        """A fresh segment against reference counts (n, ones): every statistic restarts."""
        shape = (len(self.indicators), N_BETS)
        self._n, self._ones = n.copy(), ones.copy()
        self._base_n, self._base_ones = n.copy(), ones.copy()
        self._stat = np.full(shape, 1.0 if self.rule == "ville" else 0.0)
        self._cusum = np.ones(shape)
        self._cp = np.zeros(shape, np.int64)
        self._cp_ones = np.repeat(ones[:, None], N_BETS, axis=1)
        self._count = 0  # updates in this segment
        self._offset = self._n_seen  # absolute index of the segment's first update

    # -------------------------------------------------------------------------- properties
    @property
    def log_e(self) -> dict[tuple[str, str], float]:
        """log D_j of each indicator (its average statistic over the bets) in this segment."""
        values = np.log(self._stat.mean(axis=1))
        return {ind: float(v) for ind, v in zip(self.indicators, values, strict=True)}

    @property
    def log_statistic(self) -> float:
        """log(max_j D_j / k), compared with log threshold (frozen at the alarm's value during
        warm-up / stop)."""
        if self._frozen is not None:
            return self._frozen.log_statistic
        return float(np.log(self._stat.mean(axis=1).max() / len(self.indicators)))

    @property
    def threshold_now(self) -> float:
        """The level max_j D_j / k must reach: ``threshold``, or 1/alpha for Ville."""
        return 1.0 / self.alpha if self.rule == "ville" else float(self.threshold)

    @property
    def reference(self) -> tuple[IntArray, IntArray]:
        """The current reference counts (n, ones) per indicator (online: with the stream)."""
        return self._n.copy(), self._ones.copy()

    # ---------------------------------------------------------------------------- updates
    def update(self, row: ArrayLike) -> None:
        """One event's k indicators (0/1): :meth:`update_batch` of one row."""
        self.update_batch(np.asarray(row).reshape(1, -1))

    def update_batch(
        self, indicators: ArrayLike, thresholds: ArrayLike | None = None,
        on_alarm: QualityCallback | None = None,
    ) -> None:
        """Update with each row of the (n, k) 0/1 matrix in order, exactly as row by row.

        ``thresholds`` (n,), if given, is the threshold A of each update (a time budget's;
        CUSUM / SR only). ``on_alarm(i, alarm)`` is called after the update at batch position i
        that raised ``alarm``; afterwards ``last_alarms`` lists the batch's alarms.
        """
        s = _check_matrix(indicators, self.indicators)
        thr = _check_thresholds(thresholds, s.shape[0], self.rule)
        alarms: list[QualityAlarm] = []
        i = 0
        while i < s.shape[0]:
            alarm = None
            if self._phase == MONITORING:
                used, alarm = self._monitor(s[i:], None if thr is None else thr[i:])
            elif self._phase == WARMING_UP:
                used = self._collect(s[i : i + self.rebaseline - self._warmup_n])
            else:
                used = s.shape[0] - i
                self._n_seen += used
            i += used
            if alarm is not None:
                alarms.append(alarm)
                if on_alarm is not None:
                    on_alarm(i - 1, alarm)
        self._last_alarms = tuple(alarms)

    def _monitor(
        self, s: NDArray[np.bool_], thr: FloatArray | None
    ) -> tuple[int, QualityAlarm | None]:
        """Monitor events of ``s`` until an alarm or its end: (events used, the alarm)."""
        k = len(self.indicators)
        a = np.full(s.shape[0], self.threshold_now) if thr is None else thr
        p = binary_p_values(s, self._n, self._ones)
        used, hit = _detect(
            _RULES[self.rule], p, s, a * (k * N_BETS), *_GRID, self._stat, self._cusum,
            self._cp, self._cp_ones, self._ones, self._count, math.exp(CHANGEPOINT_SLACK),
        )
        self._n += used
        self._count += used
        self._n_seen += used
        if hit < 0:
            return used, None
        return used, self._raise(hit, float(a[used - 1]))

    def _raise(self, hit: int, threshold: float) -> QualityAlarm:
        k = len(self.indicators)
        best = int(np.argmax(self._stat[hit]))
        event = AlarmEvent(
            self._n_seen - 1, self._offset + int(self._cp[hit, best]),
            float(np.log(self._stat[hit].mean() / k)), math.log(threshold),
            float(np.log(self._stat[hit].mean())),
        )
        alarm = QualityAlarm(event, self._evidence(threshold))
        self._n_alarms += 1
        self._frozen = event
        self._phase = WARMING_UP if self.rebaseline > 0 else STOPPED
        self._warmup[:] = 0
        self._warmup_n = 0
        return alarm

    def _evidence(self, threshold: float) -> tuple[dict[str, Any], ...]:
        d = self._stat.mean(axis=1)
        rows = []
        for j, (feature, rate) in enumerate(self.indicators):
            best = int(np.argmax(self._stat[j]))
            cp = int(self._cp[j, best])
            since = max(self._count - cp, 1)
            rows.append({
                "feature": feature, "rate": rate,
                "calibration_rate": float(self._base_ones[j] / max(self._base_n[j], 1)),
                "rate_after": float((self._ones[j] - self._cp_ones[j, best]) / since),
                "log_e": float(np.log(d[j])), "changepoint_index": self._offset + cp,
                "alarmed": bool(d[j] >= threshold * len(self.indicators)),
            })
        return tuple(sorted(rows, key=lambda r: -r["log_e"]))

    def _collect(self, s: NDArray[np.bool_]) -> int:
        """Warm-up: count the events into the fresh reference; restart when it is full."""
        self._warmup += s.sum(axis=0)
        self._warmup_n += s.shape[0]
        self._n_seen += s.shape[0]
        if self._warmup_n >= self.rebaseline:
            self._frozen = None
            self._phase = MONITORING
            self._start(np.full(len(self.indicators), self._warmup_n, np.int64), self._warmup)
        return s.shape[0]

    # ---------------------------------------------------------------------------- state
    _ARRAYS = ("n", "ones", "base_n", "base_ones", "stat", "cusum", "cp", "cp_ones", "warmup")

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state (builtins); :meth:`from_state` continues exactly."""
        return new_state(
            self,
            params={"indicators": [list(i) for i in self.indicators], "rule": self.rule,
                    "threshold": self.threshold, "alpha": self.alpha,
                    "rebaseline": self.rebaseline},
            phase=self._phase, n_seen=self._n_seen, n_alarms=self._n_alarms,
            offset=self._offset, count=self._count, warmup_n=self._warmup_n,
            last_alarms=[a.to_json() for a in self._last_alarms],
            frozen=None if self._frozen is None else self._frozen.to_json(),
            **{name: getattr(self, f"_{name}").tolist() for name in self._ARRAYS},
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        params = dict(state["params"])
        k = len(params["indicators"])
        params["indicators"] = [tuple(i) for i in params["indicators"]]
        obj = cls(**params, reference_n=np.zeros(k, np.int64),
                  reference_ones=np.zeros(k, np.int64))
        obj._phase, obj._n_seen = str(state["phase"]), int(state["n_seen"])
        obj._n_alarms, obj._offset = int(state["n_alarms"]), int(state["offset"])
        obj._count, obj._warmup_n = int(state["count"]), int(state["warmup_n"])
        obj._last_alarms = tuple(QualityAlarm.from_json(a) for a in state["last_alarms"])
        obj._frozen = None if state["frozen"] is None else AlarmEvent(**state["frozen"])
        for name in cls._ARRAYS:
            dtype = np.float64 if name in ("stat", "cusum") else np.int64
            setattr(obj, f"_{name}", np.asarray(state[name], dtype))
        return obj


# ------------------------------------------------------------------------------ checks
def _check_indicators(indicators: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    out = tuple((str(f), str(r)) for f, r in indicators)
    if not out:
        raise ValueError("indicators must name at least one (feature, rate) pair")
    for _, rate in out:
        check_choice("indicator rate", rate, QUALITY_RATES)
    if len(set(out)) != len(out):
        raise ValueError(f"indicators must be distinct, got {list(out)!r}")
    return out


def _check_counts(n: ArrayLike, ones: ArrayLike, k: int) -> tuple[IntArray, IntArray]:
    n_arr, ones_arr = np.asarray(n), np.asarray(ones)
    for name, arr in (("reference_n", n_arr), ("reference_ones", ones_arr)):
        if arr.shape != (k,) or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must be {k} integers (one per indicator), got {arr!r}")
    bad = np.flatnonzero((ones_arr < 0) | (ones_arr > n_arr))
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"reference_ones[{j}] = {ones_arr[j]} must lie in [0, reference_n[{j}]"
                         f" = {n_arr[j]}]")
    return n_arr.astype(np.int64), ones_arr.astype(np.int64)


def _check_matrix(values: ArrayLike, indicators: tuple[tuple[str, str], ...]) -> NDArray[np.bool_]:
    arr = np.asarray(values)
    k = len(indicators)
    if arr.ndim != 2 or arr.shape[1] != k:
        raise ValueError(f"indicators must have shape (n, {k}), got {arr.shape}")
    if arr.dtype == np.bool_:
        return np.ascontiguousarray(arr)
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        feature, rate = indicators[j]
        value = arr[i, j].item()
        raise ValueError(f"indicators row {i}, {feature!r} {rate}: {value!r} is not 0 or 1")
    return np.ascontiguousarray(arr == 1)


def _check_thresholds(thresholds: ArrayLike | None, n: int, rule: str) -> FloatArray | None:
    if thresholds is None:
        return None
    if rule == "ville":
        raise ValueError("thresholds (a time budget) apply to the cusum and shiryaev_roberts "
                         "rules; ville alarms at 1/alpha")
    arr = np.asarray(thresholds, np.float64).reshape(-1)
    if arr.size != n or not np.all(np.isfinite(arr) & (arr > 1.0)):
        raise ValueError(f"thresholds must be {n} finite numbers > 1, one per update")
    return arr
