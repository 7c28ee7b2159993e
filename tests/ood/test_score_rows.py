"""``Scorer.score_rows``: a row's score does not depend on the rows scored with it, to the last
bit (issue #13: the covariate monitor's batch path equals its per-event path whatever the
batches), and it is the scorer's score up to rounding.

Why it exists: BLAS may round a row's product differently in a batch of another shape. Whether
it does depends on the CPU kernel OpenBLAS picks at run time: seen with its AVX-512 kernels (a
test asserted it until a machine without AVX-512 computed the 2 000-row and the 2-row products
bit for bit alike), so no test asserts it; the tests below assert the invariance either way."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.core.ood import make_scorer
from monitor.core.ood._distances import kth_partial_sq_distance, row_products


def _pieces(score: Any, X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    whole = score(X)
    alone = np.concatenate([score(X[i : i + 1]) for i in range(X.shape[0])])
    pieces = np.concatenate([score(X[i : i + 37]) for i in range(0, X.shape[0], 37)])
    return whole, alone, pieces


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("knn", {"k": 1, "standardize": True, "normalize": False}),
        ("knn", {"k": 5, "normalize": True}),
        ("knn", {"k": 3, "normalize": True, "dtype": "float32"}),
        ("mahalanobis", {"standardize": True}),
        ("mahalanobis", {}),
        ("energy", {}),  # no override: the default scores each row alone
    ],
)
def test_a_rows_score_does_not_depend_on_its_batch(name: str, params: dict[str, Any]) -> None:
    rng = np.random.default_rng(len(params))
    width = 9
    bank = rng.normal(size=(500, width)) * [1, 2, 3, 1, 1, 5, 1, 1, 0.1]
    bank[::7] = bank[0]  # duplicates: ties in the selection
    scorer = make_scorer(name, **params).fit(bank)
    X = rng.normal(size=(300, width)) * 1.5
    X[:2] = bank[:2]
    whole, alone, pieces = _pieces(scorer.score_rows, X)
    assert whole.tobytes() == alone.tobytes() == pieces.tobytes()
    rtol = 1e-4 if params.get("dtype") == "float32" else 1e-9
    atol = 1e-2 if params.get("dtype") == "float32" else 1e-6  # cancellation at distance 0
    np.testing.assert_allclose(whole, scorer.score(X), rtol=rtol, atol=atol)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6, 9])
def test_the_kth_selection_is_np_partition_with_ties_infinities_and_nans(k: int) -> None:
    rng = np.random.default_rng(k)
    for dtype in (np.float64, np.float32):
        bank: Any = rng.integers(-2, 3, size=(30, 4)).astype(dtype)  # many ties
        bank_t = np.ascontiguousarray(bank.T)
        norms = (bank.astype(np.float64) ** 2).sum(1)
        queries: Any = rng.integers(-2, 3, size=(40, 4)).astype(dtype)
        with_inf, with_nan = norms.copy(), norms.copy()
        with_inf[:5] = np.inf
        with_nan[[2, 11]] = np.nan  # NaN sorts last in np.partition
        for sq_norms in (norms, with_inf, with_nan):
            full = row_products(queries, bank_t) * -2.0 + sq_norms.astype(queries.dtype)
            want = np.partition(full, k - 1, axis=1)[:, k - 1]
            got = kth_partial_sq_distance(queries, bank_t, sq_norms, k)
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
