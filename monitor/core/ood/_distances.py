"""Squared distances whose value for a row does not depend on the rows scored with it.

A matrix product (BLAS) picks its kernel and blocking by the shape of the whole batch, so the last
bits of ``q·r`` can differ between a row scored alone and the same row scored among 500 others.
The worker scores a poll batch at once and must give the per-event results bit for bit, whatever
the batch (issue #13), so the cross products are summed here in one fixed order per (row,
reference point) pair: over the features, in order. The inner loop runs over the reference points,
which compilers vectorise without reordering any sum.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales.jit import jit


@jit
def _select(values: NDArray[np.floating], k: int, best: NDArray[np.floating]) -> float:
    """The k-th smallest (1-based) of ``values``, NaN sorting last (np.partition's order
    statistic). ``best`` is scratch of length k. The first k values fill a sorted buffer; after
    that a value enters only when it is below the current k-th smallest, a test that is rarely
    true and cheap to predict."""
    m = values.shape[0]
    filled = 0
    j = 0
    while j < m and filled < k:
        v = values[j]
        p = filled
        filled += 1
        while p > 0 and (best[p - 1] > v or (best[p - 1] != best[p - 1] and v == v)):
            best[p] = best[p - 1]
            p -= 1
        best[p] = v
        j += 1
    bound = best[k - 1]
    if bound != bound:  # a NaN among the k smallest so far: compare with NaN sorting last
        for jj in range(j, m):
            v = values[jj]
            if v < bound or (bound != bound and v == v):
                p = k - 1
                while p > 0 and (best[p - 1] > v or (best[p - 1] != best[p - 1] and v == v)):
                    best[p] = best[p - 1]
                    p -= 1
                best[p] = v
                bound = best[k - 1]
        return bound
    for jj in range(j, m):
        v = values[jj]
        if v < bound:  # False for NaN, which sorts last
            p = k - 1
            while p > 0 and best[p - 1] > v:
                best[p] = best[p - 1]
                p -= 1
            best[p] = v
            bound = best[k - 1]
    return bound


@jit
def _products_into(block: NDArray[np.floating], i: int, b: NDArray[np.floating],
                   row: NDArray[np.floating]) -> None:
    """row[j] = Σ_c block[i, c]·b[c, j], summed over c in order (vectorised over j)."""
    for j in range(b.shape[1]):
        row[j] = 0.0
    for c in range(block.shape[1]):
        q = block[i, c]
        col = b[c]
        for j in range(b.shape[1]):
            row[j] += q * col[j]


@jit
def _kth_half_distances(
    block: NDArray[np.floating], bank_t: NDArray[np.floating], sq_norms: NDArray[np.floating],
    k: int, out: NDArray[np.floating],
) -> None:
    """out[i] = the k-th smallest (1-based) of row i of :func:`_half_distances` (the same
    order statistic as ``np.partition``), without storing the row's m values for long."""
    m = bank_t.shape[1]
    row = np.empty(m, out.dtype)
    best = np.empty(k, out.dtype)
    for i in range(block.shape[0]):
        _products_into(block, i, bank_t, row)
        for j in range(m):
            row[j] = row[j] * -2.0 + sq_norms[j]
        out[i] = _select(row, k, best)


def kth_partial_sq_distance(
    block: NDArray[np.floating], bank_t: NDArray[np.floating], sq_norms: NDArray[np.floating],
    k: int,
) -> NDArray[np.floating]:
    """For each row of ``block``, the k-th smallest of ``‖r_j‖² − 2 q·r_j`` over the columns
    ``r_j`` of ``bank_t`` (the reference points transposed, shape (d, m); add ``‖q‖²`` for
    squared distances), for 1-based ``k`` ≤ m: one pass, no (n, m) matrix.

    Examples
    --------
    >>> bank = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]])
    >>> q = np.array([[3.0, 0.0], [0.0, 0.0]])
    >>> kth_partial_sq_distance(q, np.ascontiguousarray(bank.T), (bank**2).sum(1), 2) + [9.0, 0.0]
    array([9., 1.])
    """
    block = np.ascontiguousarray(block)
    out = np.empty(block.shape[0], dtype=np.result_type(block, bank_t))
    _kth_half_distances(block, bank_t, sq_norms.astype(out.dtype, copy=False), int(k), out)
    return out


@jit
def _row_products(a: NDArray[np.floating], b: NDArray[np.floating], out: NDArray[np.floating]
                  ) -> None:
    for i in range(a.shape[0]):
        _products_into(a, i, b, out[i])


def row_products(a: NDArray[np.floating], b: NDArray[np.floating]) -> NDArray[np.floating]:
    """``a @ b`` with each entry summed over the inner dimension in order, so that a row of
    the result does not depend on the other rows of ``a``.

    >>> row_products(np.array([[1.0, 2.0]]), np.array([[3.0], [4.0]]))
    array([[11.]])
    """
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    out = np.empty((a.shape[0], b.shape[1]), dtype=np.result_type(a, b))
    _row_products(a, b, out)
    return out


@jit
def _kth_smallest_rows(sq: NDArray[np.floating], k: int, out: NDArray[np.floating]) -> None:
    n = sq.shape[0]
    best = np.empty(k, sq.dtype)
    for i in range(n):
        out[i] = _select(sq[i], k, best)


def kth_smallest_rows(sq: NDArray[np.floating], k: int) -> NDArray[np.floating]:
    """The k-th smallest (1-based) value of each row, counting repeats: the same values as
    ``np.partition(sq, k - 1, axis=1)[:, k - 1]`` (NaN last), in one compiled pass per row.

    >>> kth_smallest_rows(np.array([[3.0, 1.0, np.nan, 2.0]]), 3)
    array([3.])
    """
    sq = np.ascontiguousarray(sq)
    out = np.empty(sq.shape[0], sq.dtype)
    _kth_smallest_rows(sq, int(k), out)
    return out
