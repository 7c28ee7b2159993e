from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.core.scores import (
    CONDITIONAL_SCORES,
    PAIR_RESIDUALS,
    SCALED_RESIDUALS,
    abs_residual,
    make_conditional_score,
    normalized_residual,
    one_minus_prob,
    signed_residual,
)


def test_residuals_are_vectorised() -> None:
    y, yhat = np.array([1.0, 5.0, -2.0]), np.array([2.0, 2.0, -2.0])
    np.testing.assert_array_equal(signed_residual(y, yhat), [-1.0, 3.0, 0.0])
    np.testing.assert_array_equal(abs_residual(y, yhat), [1.0, 3.0, 0.0])
    assert float(abs_residual(3.0, 1.0)) == 2.0


def test_residual_shapes_must_match() -> None:
    with pytest.raises(ValueError, match="shape"):
        abs_residual([1.0, 2.0], [1.0])


def test_one_minus_prob_vector_and_matrix() -> None:
    proba = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4]])
    np.testing.assert_allclose(one_minus_prob(proba, [0, 1, 2]), [0.3, 0.9, 0.6])
    assert float(one_minus_prob([0.25, 0.75], 1)) == pytest.approx(0.25)
    np.testing.assert_allclose(one_minus_prob(proba, np.array([2.0, 2.0, 0.0])), [0.9, 0.2, 0.7])


@pytest.mark.parametrize(
    ("proba", "y", "message"),
    [
        ([[0.5, 0.5]], [2], "class indices"),
        ([[0.5, 0.5]], [-1], "class indices"),
        ([[0.5, 0.5]], [0.5], "class indices"),
        ([[0.5, 0.5]], [0, 1], "shape"),
        ([1.0], 0, "k >= 2"),
    ],
)
def test_one_minus_prob_rejects_bad_input(proba: list[Any], y: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        one_minus_prob(proba, y)


def test_make_conditional_score_has_uniform_signature() -> None:
    assert set(CONDITIONAL_SCORES) == {"abs_residual", "signed_residual", "one_minus_prob"}
    assert make_conditional_score("abs_residual")(2.0, 5.0) == 3.0
    assert make_conditional_score("signed_residual")(2.0, 5.0) == 3.0
    assert make_conditional_score("one_minus_prob")([0.9, 0.1], 0) == pytest.approx(0.1)


def test_make_conditional_score_names_valid_values() -> None:
    with pytest.raises(ValueError, match="abs_residual"):
        make_conditional_score("rmse")


def test_pair_residuals_equal_the_vectorised_scores() -> None:
    # The worker's one-pair fast path must give the very floats of the vectorised scores.
    rng = np.random.default_rng(7)
    yhat, y = rng.normal(size=500) * 1e3, rng.normal(size=500) * 1e3
    assert set(PAIR_RESIDUALS) == set(CONDITIONAL_SCORES) - {"one_minus_prob"}
    for name, pair in PAIR_RESIDUALS.items():
        vectorised = make_conditional_score(name)(yhat, y).tolist()
        assert [pair(p, t) for p, t in zip(yhat.tolist(), y.tolist(), strict=True)] == vectorised


def test_normalized_residual_divides_by_the_scale() -> None:
    got = normalized_residual([1.0, 5.0, -2.0], [2.0, 2.0, -2.0], [0.5, 3.0, 1e-3])
    np.testing.assert_array_equal(got, [2.0, 1.0, 0.0])
    # the one-pair form used by the stream gives the very same floats
    rng = np.random.default_rng(11)
    yhat, y, scale = rng.normal(size=300) * 1e3, rng.normal(size=300) * 1e3, rng.random(300) + 1e-6
    pair = SCALED_RESIDUALS["normalized_residual"]
    assert [pair(p, t, s) for p, t, s in zip(yhat.tolist(), y.tolist(), scale.tolist(),
                                              strict=True)] == \
        normalized_residual(y, yhat, scale).tolist()


@pytest.mark.parametrize("scale", [[0.0], [-1.0], [float("nan")], [float("inf")], [1.0, 1.0]])
def test_normalized_residual_rejects_a_bad_scale(scale: list[float]) -> None:
    with pytest.raises(ValueError, match="scale"):
        normalized_residual([1.0], [2.0], scale)


def test_make_conditional_score_points_scaled_scores_elsewhere() -> None:
    with pytest.raises(ValueError, match="needs the scale"):
        make_conditional_score("normalized_residual")
