"""KNN and Mahalanobis against independent computations, and their invariances."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import mahalanobis
from sklearn.neighbors import NearestNeighbors

from monitor.core.ood import KNN, Mahalanobis, NotFittedError, make_scorer


def _data(seed: int, n: int = 300, d: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    return rng.normal(size=(n, d)) @ A + 2.0, rng.normal(size=(40, d)) @ A


@pytest.mark.parametrize("k", [1, 5, 17])
@pytest.mark.parametrize("normalize", [True, False])
def test_knn_matches_sklearn_neighbours(k: int, normalize: bool) -> None:
    cal, test = _data(k)
    if normalize:
        ref = cal / np.linalg.norm(cal, axis=1, keepdims=True)
        qry = test / np.linalg.norm(test, axis=1, keepdims=True)
    else:
        ref, qry = cal, test
    dist, _ = NearestNeighbors(n_neighbors=k).fit(ref).kneighbors(qry)
    got = KNN(k=k, normalize=normalize).fit(cal).score(test)
    np.testing.assert_allclose(got, -dist[:, k - 1], rtol=1e-7, atol=1e-7)


def test_knn_standardized_matches_loop_and_blocks() -> None:
    cal, test = _data(3, n=2000)
    mu, sd = cal.mean(axis=0), cal.std(axis=0)
    expected = np.array(
        [-np.sort(np.linalg.norm((cal - mu) / sd - (x - mu) / sd, axis=1))[0] for x in test]
    )
    scorer = make_scorer("knn", standardize=True, normalize=False, k=1).fit(cal)
    assert scorer.input == "features"
    many = np.repeat(test, 60, axis=0)  # 2400 rows x 2000 refs: spans several blocks
    np.testing.assert_allclose(scorer.score(test), expected, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(scorer.score(many), np.repeat(expected, 60), rtol=1e-7, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(scale=st.floats(1e-3, 1e3), seed=st.integers(0, 2**16))
def test_knn_invariant_to_embedding_scale(scale: float, seed: int) -> None:
    cal, test = _data(seed, n=80, d=4)
    base = KNN(k=3).fit(cal).score(test)
    scaled = KNN(k=3).fit(scale * cal).score(scale * test)
    np.testing.assert_allclose(scaled, base, atol=1e-8)


def test_mahalanobis_single_class_matches_scipy() -> None:
    cal, test = _data(4)
    reg = 1e-3
    cov = np.cov(cal, rowvar=False, bias=True)
    cov += reg * np.trace(cov) / cov.shape[0] * np.eye(cov.shape[0])
    inv = np.linalg.inv(cov)
    expected = [-(mahalanobis(x, cal.mean(axis=0), inv) ** 2) for x in test]
    np.testing.assert_allclose(Mahalanobis(reg=reg).fit(cal).score(test), expected, rtol=1e-8)


def test_mahalanobis_class_means_shared_covariance_loop() -> None:
    cal, test = _data(5)
    y = np.arange(cal.shape[0]) % 3
    means = {c: cal[y == c].mean(axis=0) for c in range(3)}
    resid = np.vstack([cal[y == c] - means[c] for c in range(3)])
    cov = resid.T @ resid / cal.shape[0]
    inv = np.linalg.inv(cov + 1e-3 * np.trace(cov) / cov.shape[0] * np.eye(cov.shape[0]))
    expected = [-min(mahalanobis(x, means[c], inv) ** 2 for c in range(3)) for x in test]
    np.testing.assert_allclose(Mahalanobis().fit(cal, y).score(test), expected, rtol=1e-8)


@settings(max_examples=30, deadline=None)
@given(shift=st.floats(-1e3, 1e3), seed=st.integers(0, 2**16))
def test_mahalanobis_invariant_to_translation_of_all_data(shift: float, seed: int) -> None:
    cal, test = _data(seed, n=60, d=3)
    offset = shift * np.linspace(-1.0, 1.0, 3)
    base = Mahalanobis().fit(cal).score(test)
    moved = Mahalanobis().fit(cal + offset).score(test + offset)
    np.testing.assert_allclose(moved, base, rtol=1e-6, atol=1e-8)


def test_standardized_mahalanobis_is_scale_free_per_column() -> None:
    cal, test = _data(6)
    col_scale = np.array([1e-3, 1.0, 1e3, 5.0, 0.2, 70.0])
    base = make_scorer("mahalanobis", standardize=True).fit(cal).score(test)
    scaled = make_scorer("mahalanobis", standardize=True).fit(cal * col_scale)
    np.testing.assert_allclose(scaled.score(test * col_scale), base, rtol=1e-6)
    assert scaled.input == "features"


def test_constant_column_and_few_points_stay_finite() -> None:
    rng = np.random.default_rng(7)
    cal = np.column_stack([rng.normal(size=(10, 20)), np.zeros(10)])
    scores = Mahalanobis(standardize=True).fit(cal).score(np.ones((3, 21)))
    assert np.isfinite(scores).all()
    assert np.isfinite(KNN(k=1, standardize=True, normalize=False).fit(cal).score(cal)).all()


def test_state_round_trip_gives_same_scores() -> None:
    cal, test = _data(8)
    for scorer in (KNN(k=2).fit(cal), Mahalanobis(standardize=True).fit(cal)):
        clone = type(scorer).from_state(scorer.state_dict())
        np.testing.assert_array_equal(clone.score(test), scorer.score(test))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: KNN(k=0), "k must be"),
        (lambda: KNN(input_kind="logits"), "input_kind must be one of"),
        (lambda: Mahalanobis(reg=-1.0), "reg must be"),
        (lambda: make_scorer("nope"), "scorer name must be one of"),
    ],
)
def test_invalid_parameters_name_the_valid_values(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        build()


def test_errors_on_misuse() -> None:
    cal, test = _data(9)
    with pytest.raises(NotFittedError):
        KNN().score(test)
    with pytest.raises(ValueError, match="at least 10 calibration points"):
        KNN(k=10).fit(cal[:5])
    with pytest.raises(ValueError, match="columns"):
        KNN().fit(cal).score(test[:, :3])
    with pytest.raises(ValueError, match="NaN"):
        Mahalanobis().fit(np.full((5, 2), np.nan))
    with pytest.raises(ValueError, match="2-d"):
        Mahalanobis().fit(cal).score(test[0])


def test_knn_float32_is_close_to_float64() -> None:
    cal, test = _data(10, n=500, d=16)
    exact = KNN(k=3).fit(cal).score(test)
    fast = KNN(k=3, dtype="float32").fit(cal).score(test)
    assert fast.dtype == np.float64
    np.testing.assert_allclose(fast, exact, atol=1e-3)
    with pytest.raises(ValueError, match="dtype must be one of"):
        KNN(dtype="float16")  # type: ignore[arg-type]
