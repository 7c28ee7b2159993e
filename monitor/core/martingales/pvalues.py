"""Smoothed online conformal p-values (the input of every conformal test martingale).

Nonconformity scores: larger means stranger. At step t with reference multiset R_t (the
calibration scores followed by every earlier test score) the smoothed conformal p-value is

    p_t = (#{s in R_t: s > s_t} + U_t·(#{s in R_t: s = s_t} + 1)) / (|R_t| + 1),

Vovk, Gammerman & Shafer, *Algorithmic Learning in a Random World* (ALRW, 2nd ed.), eq. (2.20)
with the test point counted among the ties; under exchangeability p_1, p_2, ... are i.i.d.
Unif(0, 1) (ALRW Theorem 11.1; Vovk et al. 2021, "Retrain or not retrain", Proposition 1).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from functools import cache, partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.martingales.jit import compiled_entry, jit
from monitor.core.martingales.state import (
    check_state,
    decode_float,
    encode_float,
    new_state,
    rng_from_state,
    rng_state,
)

__all__ = ["ConformalPValue", "conformal_p_values"]

_UNIFORM_BLOCK = 256


def _as_scores(values: ArrayLike, what: str) -> NDArray[np.float64]:
    """1-D float64 copy of ``values``; NaN has no rank, so it is rejected."""
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if np.isnan(arr).any():
        raise ValueError(f"{what} contain NaN; a nonconformity score must be a number")
    return arr


class _Fenwick:
    """Counts per bin with O(log bins) prefix sums (Fenwick 1994)."""

    def __init__(self, n_bins: int) -> None:
        self.n_bins = n_bins
        self.tree = [0] * (n_bins + 1)
        self.counts = [0] * n_bins

    def add(self, b: int) -> None:
        self.counts[b] += 1
        i = b + 1
        while i <= self.n_bins:
            self.tree[i] += 1
            i += i & -i

    def count_le(self, b: int) -> int:
        """Number of items in bins 0..b."""
        i, total = b + 1, 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


class _QuantizedReference:
    """Bounded-memory reference: counts of quantized scores over fixed bins.

    The bin edges are quantiles of the even-indexed positions of the initial reference; only the
    odd-indexed positions are counted. Conditional on the edge half, the remaining sequence is
    still exchangeable and the quantizer is a fixed function, so the quantized scores are an
    exchangeable sequence and their smoothed conformal p-values are exactly i.i.d. uniform
    (docs/algorithms.md, "Bounded-memory p-values").
    """

    def __init__(self, reference: NDArray[np.float64], max_bins: int) -> None:
        if reference.size < 2:
            raise ValueError(
                "max_reference needs a reference of at least 2 calibration scores to fix the bins"
            )
        self._count(_bin_edges(reference[0::2], max_bins), reference[1::2])

    @classmethod
    def from_edges(
        cls, edge_scores: NDArray[np.float64], counted: NDArray[np.float64], max_bins: int
    ) -> _QuantizedReference:
        """Bins whose edges are quantiles of ``edge_scores``, counting ``counted``."""
        quant = cls.__new__(cls)
        quant._count(_bin_edges(edge_scores, max_bins), counted)
        return quant

    def _count(self, edges: list[float], counted: NDArray[np.float64]) -> None:
        self.edges = edges
        self.fenwick = _Fenwick(len(edges) + 1)
        self.size = 0
        for s in counted.tolist():
            self.insert(s)

    def insert(self, score: float) -> None:
        self.fenwick.add(bisect_right(self.edges, score))
        self.size += 1

    def rank_insert(self, score: float, u: float) -> float:
        """Smoothed p-value (ALRW eq. (2.20)) of ``score``, then insert it."""
        b = bisect_right(self.edges, score)
        greater = self.size - self.fenwick.count_le(b)
        p = (greater + u * (self.fenwick.counts[b] + 1)) / (self.size + 1)
        self.fenwick.add(b)
        self.size += 1
        return p

    def grow(self) -> None:
        """Never needed: the bins are fixed."""


def _bin_edges(scores: NDArray[np.float64], max_bins: int) -> list[float]:
    """At most ``max_bins - 1`` edges: the empirical quantiles of ``scores`` at k/max_bins."""
    probs = np.linspace(0.0, 1.0, max_bins + 1)[1:-1]
    return np.unique(np.quantile(scores, probs)).tolist()


class _ExactReference:
    """Every reference score: a large sorted array plus a small unsorted insert buffer.

    A query bisects the sorted array and scans the buffer; a full buffer is sorted and merged
    into the large array. With a buffer of about √(8n) scores both costs are O(√n) simple
    operations per score, in compiled code (:func:`_rank_insert`). ``rank_insert(score, u)`` is
    the compiled kernel bound to the arrays (no Python frame per event); it returns -1 when the
    arrays must grow first.
    """

    def __init__(self, reference: NDArray[np.float64]) -> None:
        self._allocate(np.sort(reference))

    def _allocate(self, scores: NDArray[np.float64]) -> None:
        capacity = max(2 * scores.size, _MIN_CAPACITY)
        self._main = np.empty(capacity, np.float64)
        self._main[: scores.size] = scores
        self._buf = np.empty(_buffer_size(capacity), np.float64)
        self._sizes = np.array([scores.size, 0], np.int64)
        self._bind()

    def _bind(self) -> None:
        self.rank_insert = partial(_rank_insert_entry(), self._main, self._buf, self._sizes)

    @property
    def size(self) -> int:
        return int(self._sizes[0] + self._sizes[1])

    def grow(self) -> None:
        """Room for the next merge: double the large array (amortised O(1) per score)."""
        self._allocate(self.sorted_array())

    def sorted_array(self) -> NDArray[np.float64]:
        m, b = int(self._sizes[0]), int(self._sizes[1])
        out = np.empty(m + b, np.float64)
        out[:m] = self._main[:m]
        _merge_into(out, m, np.sort(self._buf[:b]), b)
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {"scores": self.sorted_array()}  # the bound kernel does not pickle

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._allocate(state["scores"])


_MIN_CAPACITY = 1024


def _buffer_size(capacity: int) -> int:
    """A power of two near √(8·capacity): balances buffer scans against merges (see above)."""
    return 1 << max(6, round(math.log2(math.sqrt(8.0 * capacity))))


@jit
def _merge_into(main: NDArray[np.float64], m: int, buf: NDArray[np.float64], b: int) -> None:
    """Merge sorted ``buf[:b]`` into sorted ``main[:m]`` in place (``main`` holds m + b).

    From the largest buffer score down: find its place by bisection, then move the run of larger
    scores up in one tight loop (no per-element comparison, unlike a textbook merge). Unsigned
    indices spare numba's negative-index wraparound test: measured 3-4× faster here.
    """
    end = m
    for k in range(b - 1, -1, -1):
        x = buf[k]
        start = _bisect(main, end, x, True)
        q = end
        while q > start:
            q -= 1
            main[np.uint64(q + k + 1)] = main[np.uint64(q)]
        main[start + k] = x
        end = start


@jit
def _bisect(a: NDArray[np.float64], n: int, x: float, right: bool) -> int:
    """Number of a[:n] that are < x (``right``: <= x); a[:n] is sorted."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x or (right and a[mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@jit
def _rank_insert(
    main: NDArray[np.float64], buf: NDArray[np.float64], sizes: NDArray[np.int64],
    score: float, u: float,
) -> float:
    """Smoothed p-value (ALRW eq. (2.20)) of ``score`` against main[:m] ∪ buf[:b], then insert it.

    Same arithmetic as :func:`_p_values_kernel`. Returns -1.0 without any change when the full
    buffer must be merged but ``main`` has no room for it.
    """
    m, b = sizes[0], sizes[1]
    if b == buf.size:
        if main.size < m + b:
            return -1.0
        buf.sort()
        _merge_into(main, m, buf, b)
        m, b = m + b, 0
    le = _bisect(main, m, score, True)
    lt = le
    if le > 0 and main[le - 1] == score:  # ties (rare for continuous scores)
        lt = _bisect(main, le, score, False)
    for k in range(b):  # the unsorted buffer: a branch-free scan
        lt += buf[k] < score
        le += buf[k] <= score
    size = m + b
    p = ((size - le) + u * ((le - lt) + 1)) / (size + 1)
    buf[b] = score
    sizes[0], sizes[1] = m, b + 1
    return p


@cache
def _rank_insert_entry() -> Callable[..., float]:
    """:func:`_rank_insert` compiled once, called without numba's per-call type dispatch."""
    f, i = np.empty(1, np.float64), np.zeros(2, np.int64)
    return compiled_entry(_rank_insert, f, f, i, 0.0, 0.0)


class ConformalPValue:
    """Smoothed online conformal p-values over a growing reference.

    Parameters
    ----------
    reference
        Calibration nonconformity scores (larger = stranger); every updated score joins them.
    seed
        Seed of the ``np.random.default_rng`` that draws one tie-breaking U_t per update.
    max_reference
        ``None`` keeps every score (exact, memory O(n)). An integer switches to the bounded,
        still exactly valid mode: scores are quantized into at most ``max_reference`` bins whose
        edges come from half of ``reference``; memory O(max_reference) (see the docs).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> cp = ConformalPValue(reference=rng.normal(size=500), seed=1)
    >>> cp.update(0.0)
    >>> round(cp.p_value, 3), cp.n_reference
    (0.476, 501)
    >>> cp.update(10.0)  # stranger than every reference score: p = U/(n+1)
    >>> cp.p_value < 1 / 500
    True

    References
    ----------
    Vovk, Gammerman, Shafer. Algorithmic Learning in a Random World, 2nd ed., eq. (2.20).
    """

    def __init__(
        self,
        reference: ArrayLike = (),
        seed: int | None = None,
        max_reference: int | None = None,
    ) -> None:
        if max_reference is not None and (
            isinstance(max_reference, bool) or not isinstance(max_reference, int | np.integer)
            or max_reference < 2
        ):
            raise ValueError(
                f"max_reference must be None or an integer >= 2, got {max_reference!r}"
            )
        self.reference = reference
        self.seed = seed
        self.max_reference = max_reference
        self._rng = np.random.default_rng(seed)
        self._uniforms: list[float] = []  # drawn ahead in blocks; same values as single draws
        self._p_value = float("nan")
        self._ref: _ExactReference | _QuantizedReference = self._build(reference)

    def _build(self, reference: ArrayLike) -> _ExactReference | _QuantizedReference:
        scores = _as_scores(reference, "reference scores")
        if self.max_reference is None:
            return _ExactReference(scores)
        return _QuantizedReference(scores, int(self.max_reference))

    @property
    def p_value(self) -> float:
        """The last p-value (nan before the first update)."""
        return self._p_value

    @property
    def n_reference(self) -> int:
        """Number of scores the next p-value is compared with."""
        return self._ref.size

    def update(self, score: float) -> None:
        """Compute the p-value of ``score`` against the reference, then add it to the reference."""
        score = float(score)
        if score != score:
            raise ValueError("score is NaN; a nonconformity score must be a number")
        uniforms = self._uniforms
        u = uniforms.pop() if uniforms else self.draw_uniform()
        p = self._ref.rank_insert(score, u)
        if p < 0.0:  # the exact reference is full; nothing changed, so grow and retry
            self._ref.grow()
            p = self._ref.rank_insert(score, u)
        self._p_value = p

    @property
    def quantized(self) -> bool:
        """Whether the reference is bin counts (``max_reference``, :meth:`quantize`)."""
        return isinstance(self._ref, _QuantizedReference)

    def quantize(self, edge_scores: ArrayLike, max_bins: int) -> None:
        """From now on, a bounded reference: at most ``max_bins`` bins whose edges are
        quantiles of ``edge_scores`` (scores that are not, and never will be, in the reference),
        with every reference score counted in its bin; memory O(max_bins) from then on.

        Exactly valid when the edge scores are exchangeable with the reference and the later
        scores (docs/algorithms.md, "Bounded reference after a limit"): given them, the bins are
        a fixed function, and a conformal p-value may use a new fixed nonconformity measure
        from any step on.
        """
        if isinstance(self._ref, _QuantizedReference):
            raise ValueError("the reference is already quantized")
        edges = _as_scores(edge_scores, "edge scores")
        if edges.size < 1 or max_bins < 2:
            raise ValueError("quantize needs at least one edge score and max_bins >= 2")
        self._ref = _QuantizedReference.from_edges(edges, self._ref.sorted_array(), max_bins)

    def reset(self, reference: ArrayLike) -> None:
        """Start over from a new calibration reference (the uniform stream continues)."""
        self.reference = reference
        self._ref = self._build(reference)
        self._p_value = float("nan")

    def draw_uniform(self) -> float:
        """The next tie-breaking uniform of this object's stream (also used by the WCTM).

        Drawn 256 at a time: ``rng.random(k)`` yields the same values as k single draws.
        """
        if not self._uniforms:
            self._uniforms = self._rng.random(_UNIFORM_BLOCK).tolist()[::-1]
        return self._uniforms.pop()

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready state; :meth:`from_state` restores it bit for bit."""
        if isinstance(self._ref, _ExactReference):
            ref: dict[str, Any] = {"scores": self._ref.sorted_array()}
        else:
            ref = {"edges": list(self._ref.edges), "counts": list(self._ref.fenwick.counts)}
        return new_state(
            self, seed=self.seed, max_reference=self.max_reference, rng=rng_state(self._rng),
            uniforms=self._uniforms[::-1],
            p_value=encode_float(self._p_value), reference=ref,
        )

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ConformalPValue:
        """Rebuild an instance from :meth:`state_dict` output."""
        check_state(state, cls)
        ref = state["reference"]
        obj = cls((), seed=state["seed"])
        obj.max_reference = state["max_reference"]
        obj._rng = rng_from_state(state["rng"])
        obj._uniforms = [float(u) for u in state["uniforms"]][::-1]
        obj._p_value = decode_float(state["p_value"], math.nan)
        if "scores" in ref:  # exact (quantized: max_reference, or quantize after a limit)
            obj._ref = _ExactReference(_as_scores(ref["scores"], "reference scores"))
        else:
            obj._ref = _restore_quantized(ref["edges"], ref["counts"])
        return obj


def _restore_quantized(edges: list[float], counts: list[int]) -> _QuantizedReference:
    quant = _QuantizedReference.__new__(_QuantizedReference)
    quant.edges = [float(e) for e in edges]
    quant.fenwick = _Fenwick(len(quant.edges) + 1)
    quant.size = 0
    for b, c in enumerate(counts):
        for _ in range(int(c)):
            quant.fenwick.add(b)
            quant.size += 1
    return quant


@jit
def _p_values_kernel(
    ref_rank: NDArray[np.int64], rank: NDArray[np.int64], n_ranks: int, u: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Fenwick-tree counting of greater/equal reference scores, in arrival order."""
    tree = np.zeros(n_ranks + 1, np.int64)
    for r in ref_rank:
        i = r + 1
        while i <= n_ranks:
            tree[i] += 1
            i += i & -i
    out = np.empty(rank.size, np.float64)
    size = ref_rank.size
    for t in range(rank.size):
        le, lt = 0, 0
        i = rank[t] + 1
        while i > 0:
            le += tree[i]
            i -= i & -i
        i = rank[t]
        while i > 0:
            lt += tree[i]
            i -= i & -i
        out[t] = ((size - le) + u[t] * ((le - lt) + 1)) / (size + 1)
        i = rank[t] + 1
        while i <= n_ranks:
            tree[i] += 1
            i += i & -i
        size += 1
    return out


def conformal_p_values(
    scores: ArrayLike, reference: ArrayLike = (), seed: int | None = None
) -> NDArray[np.float64]:
    """Batch smoothed conformal p-values, identical to :class:`ConformalPValue` with that seed.

    O((m + n) log(m + n)) for m reference and n new scores: one dense ranking, then a Fenwick
    tree over the ranks (compiled with numba when it is installed).

    Examples
    --------
    >>> import numpy as np
    >>> scores = np.random.default_rng(0).normal(size=5)
    >>> conformal_p_values(scores, reference=[0.0, 1.0], seed=3).round(3)
    array([0.362, 0.809, 0.36 , 0.597, 0.871])
    """
    s = _as_scores(scores, "scores")
    ref = _as_scores(reference, "reference scores")
    u = np.random.default_rng(seed).random(s.size)
    if s.size == 0:
        return np.empty(0, np.float64)
    _, ranks = np.unique(np.concatenate([ref, s]), return_inverse=True)
    ranks = ranks.astype(np.int64).reshape(-1)
    n_ranks = int(ranks.max()) + 1
    return _p_values_kernel(ranks[: ref.size], ranks[ref.size :], n_ranks, u)
