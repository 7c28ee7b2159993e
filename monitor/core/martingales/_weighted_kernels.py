"""Compiled inner loops of :class:`~monitor.core.martingales.weighted.WeightedConformalPValue`.

Layouts (all float64 unless stated):

- ``ref`` (2, capacity + 1): row 0 the merged reference scores in ascending order (ties in
  arrival order), row 1 the prefix sums of their weights, ``ref[1, 0] = 0``;
- ``order`` (capacity,) int64: the arrival index of each sorted score;
- ``columns`` (d, capacity): the reference features, one contiguous row per feature;
- ``pend`` (batch_size, 2 + d): the current micro-batch, one row [score, w, x_1..x_d] per event;
- ``lin``: the frozen density-ratio model (``monitor.core.martingales._logistic``).

The operations and their order are those of the list-based implementation they replace
(``tests/martingales/test_weighted_regression.py`` pins the p-values bit for bit).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales._logistic import _clipped_exp, logits_of_columns, ratio_of_row
from monitor.core.martingales.jit import compiled_entry, jit
from monitor.core.martingales.pvalues import _bisect

NAN4 = (math.nan, math.nan, math.nan, math.nan)


@jit
def weighted_step(
    x: NDArray[np.float64], lin: NDArray[np.float64], pend: NDArray[np.float64],
    ref: NDArray[np.float64], n_ref: int, n_pend: int, score: float, grow: bool,
) -> tuple[float, float, float, float]:
    """(above, tied + w_t, total, w_t) of the weighted p-value; records the event in ``pend``.

    Masses of the merged reference from prefix sums, plus a scan of the current micro-batch
    (TBCR 2019 eq. (7); WATCH eq. (8)). All NaN, and nothing recorded, if x is invalid.
    """
    w = ratio_of_row(x, lin)
    if w != w:
        return NAN4
    hi = _bisect(ref[0], n_ref, score, True)
    lo = _bisect(ref[0], hi, score, False)
    top = ref[1, n_ref]
    above, tied, pending = top - ref[1, hi], ref[1, hi] - ref[1, lo], 0.0
    if grow:
        for i in range(n_pend):
            s, wi = pend[i, 0], pend[i, 1]
            pending += wi
            if s > score:
                above += wi
            elif s == score:
                tied += wi
    total = top + pending + w
    pend[n_pend, 0] = score
    pend[n_pend, 1] = w
    pend[n_pend, 2:] = x
    return above, tied + w, total, w


@cache
def weighted_step_entry() -> Callable[..., tuple[float, float, float, float]]:
    """:func:`weighted_step` compiled once, called without numba's per-call type dispatch.

    The caller passes exactly these types: x float64, 1-D, C-contiguous; ``lin`` read-only.
    """
    lin = np.zeros(8, np.float64)
    lin.flags.writeable = False
    return compiled_entry(weighted_step, np.zeros(1, np.float64), lin, np.zeros((1, 3)),
                          np.zeros((2, 2)), 0, 0, 0.0, True)


@jit
def append_batch(
    scores: NDArray[np.float64], columns: NDArray[np.float64], order: NDArray[np.int64],
    ref: NDArray[np.float64], n: int, pend: NDArray[np.float64], k: int,
) -> None:
    """Append the batch's k points (arrival indices n..n+k-1) and merge their scores."""
    for a in range(k):
        scores[n + a] = pend[a, 0]
        for j in range(columns.shape[0]):
            columns[j, n + a] = pend[a, 2 + j]
    _merge_batch(ref, order, n, pend, k)


@jit
def _merge_batch(
    ref: NDArray[np.float64], order: NDArray[np.int64], n: int, pend: NDArray[np.float64],
    k: int,
) -> None:
    """Merge the batch's k scores into the sorted reference, in place from the back.

    Stable: a new score goes after equal reference scores and after equal earlier new ones,
    as ``np.insert(order, searchsorted(sorted, new, 'right'), stable argsort of new)``.
    """
    idx = np.empty(k, np.int64)
    for a in range(k):  # stable insertion sort of the (at most batch_size) new scores
        s, b = pend[a, 0], a
        while b > 0 and pend[idx[b - 1], 0] > s:
            idx[b] = idx[b - 1]
            b -= 1
        idx[b] = a
    srt, i, out = ref[0], n - 1, n + k - 1
    for j in range(k - 1, -1, -1):  # from the back, in place
        s = pend[idx[j], 0]
        while i >= 0 and srt[i] > s:
            srt[out], order[out] = srt[i], order[i]
            out -= 1
            i -= 1
        srt[out], order[out] = s, n + idx[j]
        out -= 1


@jit
def refresh_weights(
    columns: NDArray[np.float64], n: int, order: NDArray[np.int64], lin: NDArray[np.float64],
    ref: NDArray[np.float64], scratch: NDArray[np.float64],
) -> float:
    """Prefix sums of the n reference weights in sorted order (``ref[1]``); returns Σ w²."""
    logits_of_columns(columns, n, lin, scratch)
    cum, total, sq = ref[1], 0.0, 0.0
    cum[0] = 0.0
    for i in range(n):
        w = _clipped_exp(scratch[order[i]], lin)
        total += w
        cum[i + 1] = total
        sq += w * w
    return sq
