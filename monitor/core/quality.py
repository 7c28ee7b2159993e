"""Data-quality monitor: anytime-valid tests of per-event 0/1 indicators (a feature missing, an
unseen category, a value out of the calibration range) against their calibration rates
(docs/tabular.md, "Data-quality monitor").

**Per indicator** j, a conformal test martingale on the binary nonconformity score s ∈ {0, 1}
(1 = the indicator fired, the stranger value). The reference is the calibration's counts
(n, ones), online: each monitored event joins it after its p-value. With o ones among the n
reference scores, the smoothed conformal p-value (ALRW 2nd ed., eq. (2.20) and Prop. 2.11) is

    p = U·(o + 1)/(n + 1)             if s = 1,
    p = (o + U·(n − o + 1))/(n + 1)   if s = 0,          U ~ Unif(0, 1) independent,

and under exchangeability of the calibration and the stream the vectors (p_1t, ..., p_kt) are
independent across events t, each coordinate uniform (the proof of ALRW Thm 11.1 for any
function of the bag and the last element; one U per indicator).

**Betting**: a jumper (Vovk et al. 2021, "Retrain or not retrain", Section 3: the Simple
Jumper) over a grid of G = 40 bets with one-step factors

    f_g(p) = 1 + κ_g·(1[p ≤ c_g]/c_g − 1),   c ∈ {2⁻¹, …, 2⁻¹⁰},  κ_g = min(½, m/(1/c − 1)),
    m ∈ {1, 3, 7, 15},

each with ∫₀¹ f_g dp = 1: a share κ of the capital bet on the event {p ≤ c}, which has
probability c under the null and a higher one when the indicator fires more often than in the
reference (a fired indicator's p-value lies below the reference rate). A win multiplies the bet
by 1 + m (m + 1 is the Kelly bet for a rate m + 1 times c, when c is small). Each step first
spreads a share J of the capital evenly over the bets, so bets that lost before a change can
win after it: the one-step factor Σ_g w_g f_g(p) has predictable weights w (summing to 1), hence
conditional mean 1, and each indicator's capital M_j is a test martingale in the filtration of
the p-value vectors (ALRW Section 9.1; betting on a bounded mean with a mixture of bet sizes:
Waudby-Smith & Ramdas, JRSSB 2024, Section 5).

*Why not a bet tuned to the reference counts* (``1[p ≤ a]/a`` with a = (o + 1)/(n + 1)): o is
not a function of the past p-values, and given the calibration counts the next p-value is not
uniform (a calibration that happened to hold few ones makes the stream's p-values small), so
such a bet is outside the conformal guarantee. Hence also: an indicator that never fired in the
reference has p = U, uniform noise like any stationary indicator, and is held to the same bound
(it cannot be told apart from one without knowing the counts). The grid of c covers reference
rates from 50 % down to 0.1 %; a rate that rises from 0 gives p ≤ 1/(n + 1) and wins every bet.

**Combination**: the average M̄ = (1/k)·Σ_j M_j of the indicators' martingales (an average of
test martingales is one: Vovk & Wang, Ann. Statist. 2021, Section 2). Its factor
M̄_t/M̄_{t−1} = Σ_j w_j f_j(p_jt) with weights w_j ∝ M_j,t−1 (predictable, summing to 1) has
conditional mean 1, so M̄ is a test martingale and Ville (P(sup M̄ ≥ 1/α) ≤ α), CUSUM and
Shiryaev–Roberts (mean run length ≥ threshold; P(an alarm within m events) ≤ m/threshold) on it
keep their guarantees (:mod:`monitor.core.martingales.alarms`), under any dependence between the
indicators. The rule's threshold may change from event to event (an alarm budget of its own:
:class:`~monitor.core.martingales.alarms.EventRateThreshold`, ``thresholds`` of
:meth:`DataQualityMonitor.update_batch`).

**Diagnosis**: at an alarm, the changepoint is the rule's (:class:`~.alarms.base.RunningMinimum`);
for each indicator, log e = log M_j,now − log M_j at the changepoint (the evidence it gathered
since then), its rate since the changepoint and the reference rate it is compared with.

**Re-baselining** as the other monitors (:mod:`monitor.core.detectors._base`): after an alarm the
next ``rebaseline`` events' counts become the fresh reference, then the martingales restart.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.detectors._base import (
    MONITORING,
    STOPPED,
    WARMING_UP,
    AlarmEvent,
    check_choice,
    check_lifecycle,
    check_test_params,
    derive_seed,
)
from monitor.core.martingales import AlarmRule, make_alarm_rule
from monitor.core.martingales._jit import jit
from monitor.core.martingales._state import (
    check_state,
    decode_float,
    encode_float,
    new_state,
    rng_from_state,
    rng_state,
)
from monitor.core.martingales.alarms import CUSUM, ShiryaevRoberts

__all__ = [
    "BET_LEVELS",
    "BET_GAINS",
    "MAX_BET",
    "QUALITY_RATES",
    "SEED_KEY",
    "DataQualityMonitor",
    "QualityAlarm",
    "binary_p_values",
]

FloatArray = NDArray[np.float64]

#: The indicator kinds of the design (docs/tabular.md).
QUALITY_RATES = ("missing", "unseen", "out_of_range")
#: ``derive_seed(seed, SEED_KEY, n_alarms)`` seeds the uniforms: keys 0-3 are the covariate and
#: conditional monitors', so theirs stay bit-identical whether or not this monitor runs.
SEED_KEY = 4
#: The levels c of the bets 1[p ≤ c]/c and the shares κ of the wealth bet (module docstring).
BET_LEVELS = tuple(2.0 ** -np.arange(1, 11))
BET_GAINS = (1.0, 3.0, 7.0, 15.0)
MAX_BET = 0.5


def binary_p_values(
    scores: NDArray[np.bool_], n: NDArray[np.int64], ones: NDArray[np.int64], u: FloatArray
) -> tuple[FloatArray, NDArray[np.int64], NDArray[np.int64]]:
    """Smoothed conformal p-values of 0/1 scores (n_events, k) against online count references.

    ``n``, ``ones`` (k,) are the reference counts before the first event; each event joins the
    reference after its p-value. Returns the p-values and the counts after the last event.
    """
    s = scores.astype(np.int64)
    o = ones[None, :] + np.cumsum(s, axis=0) - s  # ones before each event
    m = n[None, :] + np.arange(s.shape[0])[:, None]  # reference size before each event
    p = np.where(s == 1, u * (o + 1.0), o + u * (m - o + 1.0)) / (m + 1.0)
    return p, n + s.shape[0], ones + s.sum(axis=0)


@jit
def _jumper_path(
    weights: FloatArray, log_mj: FloatArray, p: FloatArray, jump: float, levels: FloatArray,
    win: FloatArray, lose: FloatArray, out_mj: FloatArray, path: FloatArray,
) -> None:
    """Step each indicator's jumper over p (n, k) in place: ``weights`` (k, G) the shares of its
    capital on each bet (summing to 1), ``log_mj`` (k,) log of its capital. Writes log M_j after
    each update (n, k) and log M̄ (n,). Bet g wins win[g] (its factor) when p ≤ levels[g]."""
    n, k = p.shape
    n_comp = weights.shape[1]
    spread = jump / n_comp
    log_k = math.log(k)
    for t in range(n):
        top = -math.inf
        for j in range(k):
            pj = p[t, j]
            factor = 0.0
            for g in range(n_comp):
                w = ((1.0 - jump) * weights[j, g] + spread) * (win[g] if pj <= levels[g] else lose[g])
                weights[j, g] = w
                factor += w
            for g in range(n_comp):
                weights[j, g] /= factor
            log_mj[j] += math.log(factor)
            out_mj[t, j] = log_mj[j]
            if log_mj[j] > top:
                top = log_mj[j]
        total = 0.0
        for j in range(k):
            total += math.exp(log_mj[j] - top)
        path[t] = top + math.log(total) - log_k


def _bet_grid() -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per bet (c, κ): the level c, its factor 1 + κ(1/c − 1) on a win and 1 − κ on a loss."""
    c = np.repeat(np.asarray(BET_LEVELS), len(BET_GAINS))
    gain = np.tile(np.asarray(BET_GAINS), len(BET_LEVELS))
    kappa = np.minimum(MAX_BET, gain / (1.0 / c - 1.0))
    return c, 1.0 + kappa * (1.0 / c - 1.0), 1.0 - kappa


_GRID = _bet_grid()
N_BETS = len(BET_LEVELS) * len(BET_GAINS)


@dataclass(frozen=True, slots=True)
class QualityAlarm:
    """One data-quality alarm: the rule's :class:`AlarmEvent` and the indicators' evidence.

    ``indicators`` are dicts ``{"feature", "rate", "calibration_rate", "rate_after",
    "log_e"}`` sorted by ``log_e`` descending: the first drives the alarm most.
    """

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


class DataQualityMonitor:
    """Anytime-valid monitor of k 0/1 data-quality indicators against their reference rates.

    Parameters
    ----------
    indicators
        k pairs (feature, rate), rate one of :data:`QUALITY_RATES`; names the columns of the
        indicator matrices given to :meth:`update_batch`.
    reference_n, reference_ones
        Per indicator, the calibration events it was counted on and how many fired (k,).
    rule, threshold, alpha
        The alarm rule on M̄ (``ville`` at 1/alpha; ``cusum``, ``shiryaev_roberts`` at
        threshold), as in :class:`monitor.core.detectors.CovariateMonitor`.
    rebaseline
        Events whose counts become the fresh reference after an alarm (0 = stop).
    seed
        Seeds the p-values' uniforms (``derive_seed(seed, SEED_KEY, n_alarms)`` per segment).
    jump
        The jumper's rate J: the share of each indicator's capital spread evenly over the bets
        before each step, so that bets that lost before a change can win after it.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> monitor = DataQualityMonitor([("age", "missing"), ("city", "unseen")],
    ...                              reference_n=[1000, 500], reference_ones=[50, 5],
    ...                              threshold=1000.0, seed=0)
    >>> before = rng.uniform(size=(400, 2)) < [0.05, 0.01]
    >>> after = rng.uniform(size=(200, 2)) < [0.25, 0.01]  # age goes missing more often at 400
    >>> monitor.update_batch(np.vstack([before, after]))
    >>> alarm = monitor.last_alarms[0]
    >>> alarm.event.index, alarm.event.changepoint, alarm.indicators[0]["feature"]
    (419, 416, 'age')

    References
    ----------
    Vovk, Gammerman, Shafer. *Algorithmic Learning in a Random World*, 2nd ed. (2022), Ch. 2, 9,
    11. Waudby-Smith, Ramdas. Estimating means of bounded random variables by betting. JRSSB 86
    (2024). Vovk, Wang. E-values: calibration, combination and applications. Ann. Statist. 49
    (2021).
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
        seed: int | None = 0,
        jump: float = 0.01,
    ) -> None:
        check_test_params("composite_jumper", rule, threshold, alpha)
        check_lifecycle(rebaseline, None, seed)
        self.indicators = _check_indicators(indicators)
        n, ones = _check_counts(reference_n, reference_ones, len(self.indicators))
        self.rule = rule
        self.threshold = threshold
        self.alpha = alpha
        self.rebaseline = rebaseline
        self.seed = seed
        if not (isinstance(jump, int | float) and 0.0 < jump <= 1.0):
            raise ValueError(f"jump must lie in (0, 1], got {jump!r}")
        self.jump = jump
        self._rule: AlarmRule = make_alarm_rule(rule, threshold=threshold, alpha=alpha)
        self._phase = MONITORING
        self._n_seen = 0
        self._n_alarms = 0
        self._last_alarms: tuple[QualityAlarm, ...] = ()
        self._frozen: AlarmEvent | None = None
        self._warmup = np.zeros(len(self.indicators), np.int64)
        self._warmup_n = 0
        self._start(n, ones)

    def _start(self, n: NDArray[np.int64], ones: NDArray[np.int64]) -> None:
        """A fresh segment against reference counts (n, ones): martingales at 1."""
        k = len(self.indicators)
        self._n, self._ones = n.copy(), ones.copy()
        self._base_n, self._base_ones = n.copy(), ones.copy()
        self._weights = np.full((k, N_BETS), 1.0 / N_BETS)
        self._log_mj = np.zeros(k)
        self._rng = np.random.default_rng(derive_seed(self.seed, SEED_KEY, self._n_alarms))
        self._offset = self._n_seen  # absolute index of the segment's first update
        # the indicators at the changepoint estimate: (updates since the start, log M_j, ones)
        self._snap_at = 0
        self._snap_log_mj = self._log_mj.copy()
        self._snap_ones = self._ones.copy()

    # -------------------------------------------------------------------------- properties
    @property
    def alarm(self) -> bool:
        """True if the last update (batch) raised an alarm."""
        return bool(self._last_alarms)

    @property
    def last_alarms(self) -> tuple[QualityAlarm, ...]:
        return self._last_alarms

    @property
    def n_seen(self) -> int:
        return self._n_seen

    @property
    def n_alarms(self) -> int:
        return self._n_alarms

    @property
    def phase(self) -> str:
        return self._phase

    @property
    def log_martingale(self) -> float:
        """log M̄ (frozen at its alarm value during warm-up / stop)."""
        if self._frozen is not None:
            return self._frozen.log_martingale
        return float(_log_mean_exp(self._log_mj))

    @property
    def log_statistic(self) -> float:
        if self._frozen is not None:
            return self._frozen.log_statistic
        return self._rule.log_statistic

    @property
    def log_e(self) -> dict[tuple[str, str], float]:
        """log M_j of each indicator in the current segment."""
        return {ind: float(v) for ind, v in zip(self.indicators, self._log_mj, strict=True)}

    @property
    def reference(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The current reference counts (n, ones) per indicator (online: with the stream)."""
        return self._n.copy(), self._ones.copy()

    @property
    def changepoint(self) -> int | None:
        if self._frozen is not None:
            return self._frozen.changepoint
        cp = self._rule.changepoint
        return None if cp is None or self._rule.n == 0 else self._offset + int(cp)

    # ---------------------------------------------------------------------------- updates
    def update(self, row: ArrayLike) -> None:
        """One event's k indicators (0/1): as :meth:`update_batch` of one row."""
        self.update_batch(np.asarray(row).reshape(1, -1))

    def update_batch(
        self, indicators: ArrayLike, thresholds: ArrayLike | None = None,
        on_alarm: QualityCallback | None = None,
    ) -> None:
        """Update with each row of the (n, k) 0/1 matrix in order, bit for bit as row by row.

        ``thresholds`` (n,), if given, is the rule's threshold for each update (a time budget's;
        ignored by Ville). ``on_alarm(i, alarm)`` is called after the update at batch position i
        that raised ``alarm``; afterwards ``last_alarms`` lists the batch's alarms.
        """
        s = _check_matrix(indicators, self.indicators)
        thr = _check_thresholds(thresholds, s.shape[0])
        alarms: list[QualityAlarm] = []
        i = 0
        while i < s.shape[0]:
            if self._phase == MONITORING:
                used, alarm = self._monitor(s[i:], None if thr is None else thr[i:])
            elif self._phase == WARMING_UP:
                used, alarm = self._collect(s[i : i + self.rebaseline - self._warmup_n]), None
            else:
                used, alarm = s.shape[0] - i, None
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
        n0, ones0, count0 = self._n, self._ones, self._rule.n
        weights0, log_mj0 = self._weights.copy(), self._log_mj.copy()
        u = self._rng.random(s.shape)
        p, _, _ = binary_p_values(s, n0, ones0, u)
        log_mj, path = self._step(weights0, log_mj0, p)
        self._rule, hit = _feed_rule(self._rule, path, thr)
        used = s.shape[0] if hit is None else hit + 1
        if hit is not None and hit < s.shape[0] - 1:
            log_mj, path = self._step(weights0, log_mj0, p[:used])  # the state at the alarm
        s = s[:used]
        cum_ones = ones0[None, :] + np.cumsum(s, axis=0)
        self._n, self._ones = n0 + used, cum_ones[-1].copy()
        self._snapshot(count0, np.vstack([log_mj0, log_mj]), np.vstack([ones0, cum_ones]))
        self._n_seen += used
        if hit is None:
            return used, None
        return used, self._raise(float(path[-1]))

    def _step(
        self, weights: FloatArray, log_mj: FloatArray, p: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """Bet on p (n, k) from the given jumper state (copied); the monitor's state is then the
        state after p. Returns log M_j (n, k) and log M̄ (n,) after each update."""
        self._weights, self._log_mj = weights.copy(), log_mj.copy()
        out_mj, path = np.empty(p.shape), np.empty(p.shape[0])
        _jumper_path(self._weights, self._log_mj, p, float(self.jump), *_GRID, out_mj, path)
        return out_mj, path

    def _snapshot(self, count0: int, log_mj: FloatArray, cum_ones: NDArray[np.int64]) -> None:
        """Keep the indicators as they were at the rule's changepoint estimate, if it moved into
        this span (it only moves forward: :class:`~.alarms.base.RunningMinimum`). Row r of
        ``log_mj`` / ``cum_ones`` is the state after count0 + r updates of the segment."""
        cp = self._rule.changepoint
        if cp is None or cp <= self._snap_at or cp < count0:
            return
        row = cp - count0
        self._snap_at = cp
        self._snap_log_mj = log_mj[row].copy()
        self._snap_ones = cum_ones[row].copy()

    def _raise(self, log_martingale: float) -> QualityAlarm:
        index = self._n_seen - 1
        event = AlarmEvent(index, self.changepoint, self._rule.log_statistic,
                           self._rule.log_threshold, log_martingale)
        alarm = QualityAlarm(event, self._evidence())
        self._n_alarms += 1
        self._frozen = event
        self._phase = WARMING_UP if self.rebaseline > 0 else STOPPED
        self._warmup[:] = 0
        self._warmup_n = 0
        return alarm

    def _evidence(self) -> tuple[dict[str, Any], ...]:
        since = max(self._rule.n - self._snap_at, 1)
        log_e = self._log_mj - self._snap_log_mj
        rate_after = (self._ones - self._snap_ones) / since
        base = self._base_ones / np.maximum(self._base_n, 1)
        rows = [
            {"feature": feature, "rate": rate, "calibration_rate": float(base[j]),
             "rate_after": float(rate_after[j]), "log_e": float(log_e[j])}
            for j, (feature, rate) in enumerate(self.indicators)
        ]
        return tuple(sorted(rows, key=lambda r: -r["log_e"]))

    def _collect(self, s: NDArray[np.bool_]) -> int:
        """Warm-up: count the events into the fresh reference; restart when it is full."""
        self._warmup += s.sum(axis=0)
        self._warmup_n += s.shape[0]
        self._n_seen += s.shape[0]
        if self._warmup_n >= self.rebaseline:
            n = np.full(len(self.indicators), self._warmup_n, np.int64)
            self._rule.reset()
            self._frozen = None
            self._phase = MONITORING
            self._start(n, self._warmup.copy())
        return s.shape[0]

    # ---------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state; :meth:`from_state` continues bit for bit."""
        return new_state(
            self,
            params={"indicators": [list(i) for i in self.indicators], "rule": self.rule,
                    "threshold": self.threshold, "alpha": self.alpha,
                    "rebaseline": self.rebaseline, "seed": self.seed, "jump": self.jump},
            rule=self._rule.state_dict(), phase=self._phase, n_seen=self._n_seen,
            n_alarms=self._n_alarms, offset=self._offset,
            last_alarms=[a.to_json() for a in self._last_alarms],
            frozen=None if self._frozen is None else self._frozen.to_json(),
            n=self._n.tolist(), ones=self._ones.tolist(),
            base_n=self._base_n.tolist(), base_ones=self._base_ones.tolist(),
            weights=self._weights.tolist(),
            log_mj=[encode_float(x) for x in self._log_mj.tolist()],
            snap_at=self._snap_at,
            snap_log_mj=[encode_float(x) for x in self._snap_log_mj.tolist()],
            snap_ones=self._snap_ones.tolist(), warmup=self._warmup.tolist(),
            warmup_n=self._warmup_n, rng=rng_state(self._rng),
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Self:
        check_state(state, cls)
        params = state["params"]
        k = len(params["indicators"])
        obj = cls([tuple(i) for i in params["indicators"]], np.zeros(k, np.int64),
                  np.zeros(k, np.int64), rule=params["rule"], threshold=params["threshold"],
                  alpha=params["alpha"], rebaseline=params["rebaseline"], seed=params["seed"],
                  jump=params["jump"])
        obj._rule = type(obj._rule).from_state(state["rule"])
        obj._phase, obj._n_seen = str(state["phase"]), int(state["n_seen"])
        obj._n_alarms, obj._offset = int(state["n_alarms"]), int(state["offset"])
        obj._last_alarms = tuple(QualityAlarm.from_json(a) for a in state["last_alarms"])
        obj._frozen = None if state["frozen"] is None else AlarmEvent(**state["frozen"])
        ints = ("n", "ones", "base_n", "base_ones", "snap_ones", "warmup")
        for name in ints:
            setattr(obj, f"_{name}", np.asarray(state[name], np.int64))
        obj._weights = np.asarray(state["weights"], np.float64).reshape(k, N_BETS)
        obj._log_mj = _decode_array(state["log_mj"])
        obj._snap_log_mj = _decode_array(state["snap_log_mj"])
        obj._snap_at, obj._warmup_n = int(state["snap_at"]), int(state["warmup_n"])
        obj._rng = rng_from_state(state["rng"])
        return obj


# ------------------------------------------------------------------------------ helpers
def _feed_rule(
    rule: AlarmRule, path: FloatArray, thr: FloatArray | None
) -> tuple[AlarmRule, int | None]:
    """Feed log M̄ to the rule (threshold ``thr[i]`` at update i): the rule after it and the
    first alarm's position (the rule then replayed up to the alarm, as right after it)."""
    before = rule.state_dict()
    hit = _feed(rule, path, thr)
    if hit is not None and hit < path.size - 1:
        rule = type(rule).from_state(before)
        _feed(rule, path[: hit + 1], None if thr is None else thr[: hit + 1])
    return rule, hit


def _feed(rule: AlarmRule, path: FloatArray, thr: FloatArray | None) -> int | None:
    if thr is None or not isinstance(rule, CUSUM | ShiryaevRoberts):
        return rule.update_many(path)
    cuts = [0, *(np.flatnonzero(thr[1:] != thr[:-1]) + 1).tolist(), path.size]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        rule.set_threshold(float(thr[a]))
        hit = rule.update_many(path[a:b])
        if hit is not None:
            return a + hit
    return None


def _log_mean_exp(x: FloatArray) -> float:
    top = float(np.max(x))
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.mean(np.exp(x - top))))


def _decode_array(values: list[Any]) -> FloatArray:
    flat = np.asarray(values, dtype=object).ravel()
    return np.array([decode_float(v, -math.inf) for v in flat], np.float64)


def _check_indicators(indicators: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    out = tuple((str(f), str(r)) for f, r in indicators)
    if not out:
        raise ValueError("indicators must name at least one (feature, rate) pair")
    for _, rate in out:
        check_choice("indicator rate", rate, QUALITY_RATES)
    if len(set(out)) != len(out):
        raise ValueError(f"indicators must be distinct, got {list(out)!r}")
    return out


def _check_counts(
    n: ArrayLike, ones: ArrayLike, k: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    n_arr, ones_arr = np.asarray(n), np.asarray(ones)
    for name, arr in (("reference_n", n_arr), ("reference_ones", ones_arr)):
        if arr.shape != (k,) or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must be {k} integers (one per indicator), got {arr!r}")
    if np.any(ones_arr < 0) or np.any(ones_arr > n_arr):
        j = int(np.flatnonzero((ones_arr < 0) | (ones_arr > n_arr))[0])
        raise ValueError(f"reference_ones[{j}] = {ones_arr[j]} must lie in [0, reference_n[{j}]"
                         f" = {n_arr[j]}]")
    return n_arr.astype(np.int64), ones_arr.astype(np.int64)


def _check_matrix(values: ArrayLike, indicators: tuple[tuple[str, str], ...]) -> NDArray[np.bool_]:
    arr = np.asarray(values)
    k = len(indicators)
    if arr.ndim != 2 or arr.shape[1] != k:
        raise ValueError(f"indicators must have shape (n, {k}), got {arr.shape}")
    if arr.dtype == np.bool_:
        return arr
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        feature, rate = indicators[j]
        raise ValueError(f"indicators row {i}, {feature!r} {rate}: {arr[i, j]!r} is not 0 or 1")
    return arr == 1


def _check_thresholds(thresholds: ArrayLike | None, n: int) -> FloatArray | None:
    if thresholds is None:
        return None
    arr = np.asarray(thresholds, np.float64).reshape(-1)
    if arr.size != n or not np.all(np.isfinite(arr) & (arr > 1.0)):
        raise ValueError(f"thresholds must be {n} finite numbers > 1, one per update")
    return arr
