"""Full-conformal KNN p-values: against a literal bag-by-bag computation, valid, persistent."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.core.decisions.full_conformal import FullConformalKNN
from monitor.core.ood import KNN


def literal_full_conformal(cal: np.ndarray, test: np.ndarray, knn: KNN) -> np.ndarray:
    """For each test row: put it in the bag, score every bag point by its k-th nearest other bag
    point (distances after the KNN's own transform), rank the test point's score."""
    fitted = knn.clone().fit(cal)
    out = []
    for x in test:
        bag = fitted._transform(np.vstack([cal, x]))
        d = np.sqrt(((bag[:, None, :] - bag[None, :, :]) ** 2).sum(axis=-1))
        np.fill_diagonal(d, np.inf)
        v = np.sort(d, axis=1)[:, knn.k - 1]
        out.append((v >= v[-1]).sum() / bag.shape[0])
    return np.array(out)


@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("normalize", [False, True])
def test_p_values_equal_the_literal_full_conformal_computation(k: int, normalize: bool) -> None:
    rng = np.random.default_rng(k)
    cal = rng.normal(size=(80, 4)) * [1.0, 3.0, 0.5, 2.0]
    test = np.vstack([rng.normal(size=(30, 4)), rng.normal(size=(5, 4)) + 4.0, cal[:4]])
    knn = KNN(k=k, standardize=True, normalize=normalize)
    got = FullConformalKNN(knn).fit(cal).p_values(test)
    np.testing.assert_allclose(got, literal_full_conformal(cal, test, knn), atol=1e-12)
    if not normalize:  # shifted by +4 in every column: last in the ranking (up to one tie)
        assert got[30:35].max() <= 2 / 81


def test_p_values_are_valid_on_exchangeable_rows() -> None:
    """P(p <= u) <= u: 4 000 bags of m = 39 rows + 1 test row (rounded integer data, so many
    ties, which the rule counts against the test row). Binomial SE of each frequency at
    u = j/40 is at most sqrt(u(1−u)/4000) <= 0.008; the check allows 3 SE."""
    rng = np.random.default_rng(11)
    m, reps = 39, 4000
    p = np.empty(reps)
    for r in range(reps):
        rows = np.round(rng.normal(size=(m + 1, 3)) * 2.0)
        fc = FullConformalKNN(KNN(k=1, standardize=True, normalize=False)).fit(rows[:m])
        p[r] = fc.p_values(rows[m:])[0]
    for j in (1, 2, 4, 8, 20):
        u = j / (m + 1)
        assert (p <= u + 1e-12).mean() <= u + 3 * np.sqrt(u * (1 - u) / reps)
    assert (p <= 4 / 40 + 1e-12).mean() > 0.05  # not trivially conservative


def test_state_round_trip_and_errors() -> None:
    rng = np.random.default_rng(2)
    fc = FullConformalKNN(KNN(k=3)).fit(rng.normal(size=(50, 6)))
    again = FullConformalKNN.from_state(fc.state_dict())
    X = rng.normal(size=(9, 6))
    np.testing.assert_array_equal(again.p_values(X), fc.p_values(X))
    with pytest.raises(ValueError, match="at least 4 rows"):
        FullConformalKNN(KNN(k=3)).fit(rng.normal(size=(3, 6)))
    with pytest.raises(TypeError, match=r"monitor\.core\.ood\.KNN"):
        FullConformalKNN("knn")  # type: ignore[arg-type]
