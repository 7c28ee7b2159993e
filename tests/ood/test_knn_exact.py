"""KNN.score: a row's score does not depend on the rows scored with it (issue #13), and it is
the k-th nearest distance (the selection is np.partition's order statistic, ties, infinities and
NaN included)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.ood import KNN
from monitor.ood._distances import kth_partial_sq_distance, partial_sq_distances


def exact_knn_score(knn: KNN, X: np.ndarray) -> np.ndarray:
    """The definition: −(k-th smallest Euclidean distance), from explicit differences."""
    queries = knn._transform(np.asarray(X, dtype=np.float64)).astype(knn.dtype)
    diff = queries[:, None, :].astype(np.float64) - knn.bank_[None, :, :].astype(np.float64)
    dist = np.sqrt((diff**2).sum(axis=2))
    return -np.partition(dist, knn.k - 1, axis=1)[:, knn.k - 1]


@pytest.mark.parametrize("k", [1, 3, 5, 10])
@pytest.mark.parametrize(
    "params",
    [
        {"standardize": True, "normalize": False},
        {"normalize": True},
        {"normalize": True, "dtype": "float32"},
    ],
)
def test_a_rows_score_does_not_depend_on_its_batch(k: int, params: dict[str, object]) -> None:
    rng = np.random.default_rng(k)
    bank = rng.normal(size=(500, 9)) * [1, 2, 3, 1, 1, 5, 1, 1, 0.1]
    bank[::7] = bank[0]  # duplicates: ties in the selection
    knn = KNN(k=k, **params).fit(bank)  # type: ignore[arg-type]
    X = rng.normal(size=(600, 9)) * 1.5
    X[:2] = bank[:2]  # distance 0 to a bank point
    whole = knn.score(X)
    alone = np.concatenate([knn.score(X[i : i + 1]) for i in range(X.shape[0])])
    pieces = np.concatenate([knn.score(X[i : i + 37]) for i in range(0, X.shape[0], 37)])
    assert whole.tobytes() == alone.tobytes() == pieces.tobytes()
    # ‖q‖² − 2q·r + ‖r‖² cancels near 0: a zero distance comes out as √(a few ulps of ‖q‖²).
    rtol, atol = (1e-4, 1e-2) if params.get("dtype") == "float32" else (1e-9, 1e-6)
    np.testing.assert_allclose(whole, exact_knn_score(knn, X), rtol=rtol, atol=atol)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6, 9])
def test_the_kth_selection_is_np_partition_with_ties_infinities_and_nans(k: int) -> None:
    rng = np.random.default_rng(k)
    for dtype in (np.float64, np.float32):
        bank: Any = rng.integers(-2, 3, size=(30, 4)).astype(dtype)  # many ties
        bank_t = np.ascontiguousarray(bank.T)
        sq_norms = (bank.astype(np.float64) ** 2).sum(1)
        queries: Any = rng.integers(-2, 3, size=(40, 4)).astype(dtype)
        sq_norms_cases = [sq_norms, sq_norms.copy(), sq_norms.copy()]
        sq_norms_cases[1][:5] = np.inf
        sq_norms_cases[2][[2, 11]] = np.nan  # NaN sorts last in np.partition
        for norms in sq_norms_cases:
            full = partial_sq_distances(queries, bank_t, norms)
            want = np.partition(full, k - 1, axis=1)[:, k - 1]
            got = kth_partial_sq_distance(queries, bank_t, norms, k)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
