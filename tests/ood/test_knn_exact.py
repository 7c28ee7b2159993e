"""KNN.score is bit for bit the implementation it replaced (kept as the reference in
tests/support/reference_knn.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.core.ood import KNN
from monitor.core.ood._distances import kth_smallest_rows
from tests.support.reference_knn import reference_knn_score


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
