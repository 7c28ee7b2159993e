"""KNN.score is bit for bit the implementation it replaced (copied below as the reference)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.core.ood import KNN
from monitor.core.ood._distances import kth_smallest_rows

_BLOCK_ELEMENTS = 1 << 22


def reference_knn_score(knn: KNN, X: np.ndarray) -> np.ndarray:
    """KNN.score before the in-place selection (commit d8e94db), kept to compare bits."""
    queries = np.asarray(X, dtype=np.float64)
    queries = knn._transform(queries).astype(knn.dtype)
    out = np.empty(queries.shape[0])
    step = max(1, _BLOCK_ELEMENTS // knn.bank_.shape[0])
    for start in range(0, queries.shape[0], step):
        block = queries[start : start + step]
        sq = block @ knn.bank_.T
        sq *= -2.0
        sq += knn.sq_norms_[None, :]
        kth = np.partition(sq, knn.k - 1, axis=1)[:, knn.k - 1]
        kth += np.einsum("ij,ij->i", block, block)
        out[start : start + step] = np.sqrt(np.maximum(kth, 0.0))
    return -out


@pytest.mark.parametrize("k", [1, 3, 5, 10])
@pytest.mark.parametrize(
    "params",
    [
        {"standardize": True, "normalize": False},
        {"normalize": True},
        {"normalize": True, "dtype": "float32"},
    ],
)
def test_knn_scores_are_the_previous_implementation_bit_for_bit(
    k: int, params: dict[str, object]
) -> None:
    rng = np.random.default_rng(k)
    bank = rng.normal(size=(500, 9)) * [1, 2, 3, 1, 1, 5, 1, 1, 0.1]
    bank[::7] = bank[0]  # duplicates: ties in the selection
    knn = KNN(k=k, **params).fit(bank)  # type: ignore[arg-type]
    for n in (1, 2, 256, 20_000):  # 20 000 queries span several blocks
        X = rng.normal(size=(n, 9)) * 1.5
        X[:2] = bank[: min(n, 2)]  # distance 0 to a bank point
        got, want = knn.score(X), reference_knn_score(knn, X)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), n


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6, 9])
def test_kth_smallest_is_np_partition_with_ties_infinities_and_nans(k: int) -> None:
    rng = np.random.default_rng(k)
    for dtype, rows in [(np.float64, 40), (np.float32, 40), (np.float64, 3)]:
        sq: Any = rng.integers(0, 6, size=(rows, 30)).astype(dtype)  # many ties
        sq[0, :] = np.inf
        sq[1, : k + 1] = -np.inf
        sq[2, 7] = np.inf
        want = np.partition(sq, k - 1, axis=1)[:, k - 1]
        got = kth_smallest_rows(sq.copy(), k)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
        sq[rows - 1, 2] = np.nan  # NaN sorts last in np.partition
        want = np.partition(sq, k - 1, axis=1)[:, k - 1]
        got = kth_smallest_rows(sq.copy(), k)
        assert got.tobytes() == want.tobytes()
