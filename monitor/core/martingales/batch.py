"""Compiled batch stepping of the detectors: conformal p-values, betting and alarm rule over a
span of events, stopping at the first alarm (``update_batch`` of the monitors).

Every kernel performs the operations of the per-event ``update`` paths in the same order
(``_rank_insert``, ``weighted_step``, ``_jumpers_step``, the rules' ``_step``), so a batch equals
repeated updates bit for bit (``tests/detectors/test_update_batch.py``).

The p-value kernels are *tentative*: they may compute a few p-values past an alarm; the caller
then rolls their state back (:func:`run_test` tells how many updates were used):

- the exact reference only appends to its insert buffer after the first step of a span (a span
  stops before a merge), so dropping the last entries of the buffer undoes the extra steps;
- the quantized (bounded-memory) reference is stepped on array copies of its Fenwick tree; the
  extra inserts are subtracted again before the copies are written back;
- the weighted p-values only append rows to the current micro-batch (a span never crosses a
  micro-batch boundary), so the extra rows are dropped by not counting them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales._weighted_kernels import weighted_step
from monitor.core.martingales.alarms.base import CHANGEPOINT_SLACK, AlarmRule
from monitor.core.martingales.alarms.cusum import CUSUM
from monitor.core.martingales.alarms.shiryaev_roberts import ShiryaevRoberts
from monitor.core.martingales.alarms.shiryaev_roberts import logaddexp_compiled as _logaddexp
from monitor.core.martingales.alarms.ville import Ville
from monitor.core.martingales.betting._jumpers import JumperMixture, _jumpers_step
from monitor.core.martingales.betting.agrapa import AGrapaBetting, _agrapa_step
from monitor.core.martingales.betting.base import P_FLOOR, BettingFunction
from monitor.core.martingales.betting.mixture import SimpleMixture, log_mixture
from monitor.core.martingales.betting.plug_in_power import PlugInPower, _plug_in_step
from monitor.core.martingales.betting.power import PowerBetting
from monitor.core.martingales.jit import jit
from monitor.core.martingales.pvalues import (
    ConformalPValue,
    _bisect,
    _QuantizedReference,
    _rank_insert,
)

__all__ = ["pvalue_commit", "pvalue_span", "run_test", "supports_betting", "weighted_span"]

FloatArray = NDArray[np.float64]

_JUMPERS, _POWER, _PATH, _AGRAPA, _PLUG_IN = 0, 1, 2, 3, 4
#: betting classes stepped by one compiled kernel on their own state array
_STATE_KINDS = ((JumperMixture, _JUMPERS), (AGrapaBetting, _AGRAPA), (PlugInPower, _PLUG_IN))
_VILLE, _CUSUM, _SR = 0, 1, 2
# rule state array: n, alarm, log_stat, prev, minimum, argmin, log_sum, log_threshold, estimate
_N, _ALARM, _STAT, _PREV, _MIN, _ARGMIN, _SUM, _THR, _EST = range(9)
_EMPTY = np.empty(0, np.float64)


@jit
def _test_span(
    bkind: int, bstate: FloatArray, path: FloatArray, rkind: int, rstate: FloatArray,
    ps: FloatArray, start: int, stop: int, out_m: FloatArray, out_s: FloatArray,
) -> int:
    """Bet on ps[start:stop] and step the rule; stop after the first alarm; updates used.

    ``bkind``: jumpers, aGRAPA or plug-in power (``bstate`` is the betting's state array,
    stepped in place), power (``bstate`` = [log ε, ε − 1, log S]) or a precomputed log S
    ``path`` (Simple Mixture).
    """
    n, alarm, stat = rstate[_N], rstate[_ALARM] != 0.0, rstate[_STAT]
    prev, minimum, argmin, log_sum = rstate[_PREV], rstate[_MIN], rstate[_ARGMIN], rstate[_SUM]
    thr, estimate = rstate[_THR], rstate[_EST]
    used = stop - start
    for t in range(start, stop):
        p = ps[t]
        if bkind == _JUMPERS:
            log_s = _jumpers_step(bstate, p)
        elif bkind == _AGRAPA:
            log_s = _agrapa_step(bstate, p)
        elif bkind == _PLUG_IN:
            log_s = _plug_in_step(bstate, p)
        elif bkind == _POWER:
            log_s = bstate[2] + (bstate[0] + bstate[1] * math.log(max(p, P_FLOOR)))
            bstate[2] = log_s
        else:
            log_s = path[t]
        if rkind == _SR:
            log_sum = _logaddexp(log_sum, -prev)
        # RunningMinimum.push, for every rule
        if prev <= minimum:
            minimum, argmin = prev, n
        if prev <= minimum + CHANGEPOINT_SLACK:
            estimate = n
        prev = log_s
        if rkind == _VILLE:
            stat = log_s
        elif rkind == _CUSUM:
            stat = log_s - minimum
        else:
            stat = log_s + log_sum
        n += 1.0
        out_m[t] = log_s
        out_s[t] = stat
        if stat >= thr:
            alarm = True
        if alarm:
            used = t + 1 - start
            break
    rstate[_N], rstate[_ALARM], rstate[_STAT] = n, 1.0 if alarm else 0.0, stat
    rstate[_PREV], rstate[_MIN], rstate[_ARGMIN], rstate[_SUM] = prev, minimum, argmin, log_sum
    rstate[_EST] = estimate
    return used


@jit
def _lambda_path(ps: FloatArray, start: int, stop: int, lam: float) -> FloatArray:
    """SimpleMixture's running λ = −Σ log max(p, floor), summed in order like ``update``."""
    out = np.empty(stop - start, np.float64)
    for t in range(start, stop):
        lam -= math.log(max(ps[t], P_FLOOR))
        out[t - start] = lam
    return out


def supports_betting(betting: BettingFunction) -> bool:
    return isinstance(betting, JumperMixture | AGrapaBetting | PlugInPower | PowerBetting
                      | SimpleMixture)


def _pack_rule(rule: AlarmRule) -> tuple[int, FloatArray]:
    state = np.zeros(9, np.float64)
    state[_N], state[_ALARM], state[_STAT] = rule._n, rule._alarm, rule._log_stat
    state[_THR] = rule._log_threshold
    state[_PREV], state[_MIN], state[_ARGMIN] = rule._min.prev, rule._min.minimum, rule._min.argmin
    state[_EST] = rule._min.estimate
    if isinstance(rule, Ville):
        return _VILLE, state
    assert isinstance(rule, CUSUM | ShiryaevRoberts)
    if isinstance(rule, CUSUM):
        return _CUSUM, state
    state[_SUM] = rule._log_sum
    return _SR, state


def _unpack_rule(rule: AlarmRule, state: FloatArray) -> None:
    rule._n, rule._alarm, rule._log_stat = int(state[_N]), bool(state[_ALARM]), float(state[_STAT])
    rule._min.prev, rule._min.minimum = float(state[_PREV]), float(state[_MIN])
    rule._min.argmin, rule._min.estimate = int(state[_ARGMIN]), int(state[_EST])
    if isinstance(rule, ShiryaevRoberts):
        rule._log_sum = float(state[_SUM])


def run_test(
    betting: BettingFunction, rule: AlarmRule, ps: FloatArray, start: int, stop: int,
    out_m: FloatArray, out_s: FloatArray,
) -> tuple[int, bool]:
    """Bet on ``ps[start:stop]`` exactly as repeated ``betting.update`` + ``rule.update``,
    stopping after the first step where the rule's alarm is on.

    Writes log S and the rule's log statistic after each step into ``out_m``/``out_s`` (same
    positions as ``ps``); returns (updates used, alarm). The objects are left as after those
    updates.
    """
    rkind, rstate = _pack_rule(rule)
    kind = next((k for cls, k in _STATE_KINDS if isinstance(betting, cls)), None)
    if kind is not None:
        assert isinstance(betting, JumperMixture | AGrapaBetting | PlugInPower)
        used = _test_span(kind, betting._state, _EMPTY, rkind, rstate, ps, start, stop,
                          out_m, out_s)
        betting._log_s = float(betting._state[-1])
    elif isinstance(betting, PowerBetting):
        bstate = np.array([betting._log_eps, betting._slope, betting._log_s])
        used = _test_span(_POWER, bstate, _EMPTY, rkind, rstate, ps, start, stop, out_m, out_s)
        betting._log_s = float(bstate[2])
    else:
        assert isinstance(betting, SimpleMixture)
        lams = _lambda_path(ps, start, stop, betting._lam)
        ns = betting._n + 1.0 + np.arange(stop - start, dtype=np.float64)
        path = np.empty(stop, np.float64)
        path[start:] = log_mixture(ns, lams)
        used = _test_span(_PATH, _EMPTY, path, rkind, rstate, ps, start, stop, out_m, out_s)
        betting._n += used
        betting._lam = float(lams[used - 1])
        betting._log_s = float(path[start + used - 1])
    _unpack_rule(rule, rstate)
    return int(used), bool(rule._alarm)


# ------------------------------------------------------------------------------ p-values


def peek_uniforms(pv: ConformalPValue, m: int) -> FloatArray:
    """The next (at most ``m``, at least one) tie-breaking uniforms of ``pv`` without using them.

    Only from the current block of 256 (a new block is drawn, as ``draw_uniform`` would, when
    the current one is empty), so giving unused ones back never has to undo a draw.
    """
    u = pv._uniforms
    if not u:
        pv._uniforms = u = pv._rng.random(256).tolist()[::-1]
    k = min(m, len(u))
    return np.array(u[len(u) - k :][::-1], np.float64)


def drop_uniforms(pv: ConformalPValue, k: int) -> None:
    """Use the next ``k`` uniforms (after :func:`peek_uniforms`)."""
    del pv._uniforms[len(pv._uniforms) - k :]


@jit
def _exact_span(
    main: FloatArray, buf: FloatArray, sizes: NDArray[np.int64], scores: FloatArray,
    us: FloatArray, out: FloatArray, start: int, stop: int,
) -> int:
    """``_rank_insert`` of scores[start:stop]; stops before a merge after the first step, and
    returns 0 when the first step needs a larger array."""
    for t in range(start, stop):
        if t > start and sizes[1] == buf.size:
            return t - start
        p = _rank_insert(main, buf, sizes, scores[t], us[t - start])
        if p < 0.0:
            return t - start
        out[t] = p
    return stop - start


@jit
def _quantized_span(
    edges: FloatArray, tree: NDArray[np.int64], counts: NDArray[np.int64], size: int,
    scores: FloatArray, us: FloatArray, out: FloatArray, start: int, stop: int,
) -> int:
    """``_QuantizedReference.rank_insert`` of scores[start:stop] on array copies of its
    Fenwick tree: the same integer counts, the same float operations."""
    n_bins = counts.size
    for t in range(start, stop):
        b = _bisect(edges, edges.size, scores[t], True)
        le, i = 0, b + 1
        while i > 0:
            le += tree[i]
            i -= i & -i
        out[t] = ((size - le) + us[t - start] * (counts[b] + 1)) / (size + 1)
        counts[b] += 1
        i = b + 1
        while i <= n_bins:
            tree[i] += 1
            i += i & -i
        size += 1
    return stop - start


@jit
def _quantized_remove(
    edges: FloatArray, tree: NDArray[np.int64], counts: NDArray[np.int64], scores: FloatArray,
    start: int, stop: int,
) -> None:
    """Undo the inserts of scores[start:stop]."""
    n_bins = counts.size
    for t in range(start, stop):
        b = _bisect(edges, edges.size, scores[t], True)
        counts[b] -= 1
        i = b + 1
        while i <= n_bins:
            tree[i] -= 1
            i += i & -i


class _Tentative:
    """Array copies of a quantized reference during a span (written back on commit)."""

    __slots__ = ("counts", "edges", "scores", "start", "tree")

    def __init__(self, ref: _QuantizedReference, scores: FloatArray, start: int) -> None:
        self.edges = np.array(ref.edges, np.float64)
        self.tree = np.array(ref.fenwick.tree, np.int64)
        self.counts = np.array(ref.fenwick.counts, np.int64)
        self.scores, self.start = scores, start


_TENTATIVE: dict[int, _Tentative] = {}


def pvalue_span(
    pv: ConformalPValue, scores: FloatArray, start: int, stop: int, out: FloatArray
) -> int:
    """Tentative p-values of ``scores[start:stop]`` (a prefix of it: how many are returned,
    >= 1) into ``out``, as repeated ``pv.update``; commit with :func:`pvalue_commit`."""
    ref = pv._ref
    us = peek_uniforms(pv, stop - start)
    if isinstance(ref, _QuantizedReference):
        tmp = _TENTATIVE[id(pv)] = _Tentative(ref, scores, start)
        return int(_quantized_span(tmp.edges, tmp.tree, tmp.counts, ref.size, scores, us, out,
                                   start, start + us.size))
    got = _exact_span(ref._main, ref._buf, ref._sizes, scores, us, out, start, start + us.size)
    if got == 0:
        ref.grow()
        got = _exact_span(ref._main, ref._buf, ref._sizes, scores, us, out, start,
                          start + us.size)
    return int(got)


def pvalue_commit(pv: ConformalPValue, got: int, used: int, last_p: float) -> None:
    """Keep the first ``used`` of ``got`` tentative updates of :func:`pvalue_span`."""
    ref = pv._ref
    if isinstance(ref, _QuantizedReference):
        tmp = _TENTATIVE.pop(id(pv))
        _quantized_remove(tmp.edges, tmp.tree, tmp.counts, tmp.scores, tmp.start + used,
                          tmp.start + got)
        ref.fenwick.tree, ref.fenwick.counts = tmp.tree.tolist(), tmp.counts.tolist()
        ref.size += used
    else:
        ref._sizes[1] -= got - used
    drop_uniforms(pv, used)
    pv._p_value = last_p


@jit
def weighted_span(
    Xt: FloatArray, lin: FloatArray, pend: FloatArray, ref: FloatArray, n_ref: int, k0: int,
    scores: FloatArray, us: FloatArray, grow: bool, alpha: float, sum_w2: float,
    out_p: FloatArray, out_pen: NDArray[np.bool_], out_ess: FloatArray, start: int, stop: int,
) -> int:
    """Weighted p-values of scores[start:stop] (rows Xt) as ``WeightedConformalPValue.update``
    within one micro-batch; ``out_ess`` the ``weights_ess`` after each (before any refresh).
    Returns the number computed (short if a row is invalid)."""
    top = ref[1, n_ref]
    s_pend, s_sq = 0.0, 0.0
    if grow:
        for i in range(k0):
            w = pend[i, 1]
            s_pend += w
            s_sq += w * w
    for t in range(start, stop):
        k = k0 + t - start
        above, tied_w, total, w_t = weighted_step(Xt[t], lin, pend, ref, n_ref, k, scores[t],
                                                  grow)
        if total != total:
            return t - start
        penalised = w_t / total >= alpha
        if penalised:
            out_p[t] = above / total
        else:
            out_p[t] = (above + us[t - start] * tied_w) / total
        out_pen[t] = penalised
        if grow:
            w = pend[k, 1]
            s_pend += w
            s_sq += w * w
        tot = top + s_pend
        sq = sum_w2 + s_sq
        out_ess[t] = tot * tot / sq if sq > 0.0 else 0.0
    return stop - start



def plain_span(pv: ConformalPValue, scores: NDArray[np.float64], i: int, n: int, betting: Any,
               rule: Any, trace: Any) -> tuple[int, bool]:
    """Conformal p-values of updates i.. (:func:`pvalue_span`), bet on until an alarm
    (:func:`run_test`, into ``trace``), and the updates used kept (:func:`pvalue_commit`);
    (used, alarmed)."""
    ps = trace.p_value
    got = pvalue_span(pv, scores, i, n, ps)
    used, alarm = run_test(betting, rule, ps, i, i + got, trace.log_martingale,
                           trace.log_statistic)
    pvalue_commit(pv, got, used, float(ps[i + used - 1]))
    return used, alarm
