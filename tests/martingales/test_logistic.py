"""The compiled density-ratio learner against river, its reference, and its batch paths."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from river import datasets, linear_model, optim, preprocessing

from monitor.core.martingales import OnlineDensityRatio


def phishing() -> tuple[np.ndarray, np.ndarray]:
    """river's bundled Phishing dataset (1 250 rows, 9 features) as arrays."""
    rows = list(datasets.Phishing())
    names = list(rows[0][0])
    X = np.array([[float(x[k]) for k in names] for x, _ in rows])
    return X, np.array([bool(y) for _, y in rows])


@pytest.mark.parametrize(("lr", "l2"), [(0.01, 0.0), (0.5, 0.01), (2.0, 0.0)])
def test_learner_equals_river_on_phishing(lr: float, l2: float) -> None:
    """Phishing rows are targets, legitimate rows sources: the sequence OnlineDensityRatio
    learns (each target, then a drawn source) replayed through river's learn_one."""
    X, phish = phishing()
    source, target = X[~phish], X[phish]
    seed = 3
    ratio = OnlineDensityRatio(X.shape[1], seed=seed, reservoir=source.shape[0],
                               learning_rate=lr, l2=l2)
    ratio.learn_sources(source)
    ratio.learn_targets(target[:300])
    for row in target[300:]:
        ratio.learn_target(row)
    # a reservoir that never overflowed draws nothing until the paired-source draws
    draws = np.random.default_rng(seed).integers(source.shape[0], size=target.shape[0])
    scaler = preprocessing.StandardScaler()
    model = linear_model.LogisticRegression(optimizer=optim.SGD(lr), l2=l2, intercept_lr=lr)
    for row, drawn in zip(target, draws, strict=True):
        for x, label in ((row, True), (source[drawn], False)):
            features = dict(enumerate(x.tolist()))
            scaler.learn_one(features)
            model.learn_one(scaler.transform_one(features), label)
    state, d = ratio.state_dict(), X.shape[1]

    def values(mapping: dict[str, float]) -> list[float]:
        return [mapping[str(i)] for i in range(d)]

    ours = (values(state["scaler"]["means"]), values(state["scaler"]["vars"]),
            values(state["model"]["weights"]), [state["model"]["intercept"]])
    theirs = ([scaler.means[i] for i in range(d)], [scaler.vars[i] for i in range(d)],
              [model._weights[i] for i in range(d)], [model.intercept])
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0.0)
    assert state["model"]["n_iterations"] == model.optimizer.n_iterations
    # the odds w(x) = exp(logit) with river's logit, clipped to [1e-3, 1e3]
    for x in X[:100]:
        logit = model._raw_dot_one(scaler.transform_one(dict(enumerate(x.tolist()))))
        expected = math.exp(min(max(logit, math.log(1e-3)), math.log(1e3)))
        assert ratio.weight(x) == pytest.approx(expected, rel=1e-9)


def test_batch_paths_equal_point_by_point_paths() -> None:
    """learn_sources / learn_targets: the same reservoir, random draws and model."""
    rng = np.random.default_rng(0)
    sources, targets = rng.normal(size=(700, 3)), rng.normal(0.5, 1.0, size=(90, 3))
    one, many = (OnlineDensityRatio(3, seed=4, reservoir=250) for _ in range(2))
    for x in sources[:400]:
        one.learn_source(x)
    for x in targets[:50]:
        one.learn_target(x)
    for x in sources[400:]:
        one.learn_source(x)
    for x in targets[50:]:
        one.learn_target(x)
    many.learn_sources(sources[:400])
    many.learn_targets(targets[:50])
    many.learn_sources(sources[400:])
    many.learn_targets(targets[50:])
    assert state_json(one) == state_json(many)


def state_json(ratio: OnlineDensityRatio) -> str:
    return json.dumps(ratio.state_dict(), default=lambda o: o.tolist(), sort_keys=True)


def test_invalid_rows_are_rejected_without_learning() -> None:
    ratio = OnlineDensityRatio(2, seed=0)
    before = state_json(ratio)
    with pytest.raises(ValueError, match="finite"):
        ratio.learn_targets([[0.0, 1.0], [np.inf, 0.0]])
    with pytest.raises(ValueError, match="finite"):
        ratio.learn_sources([[np.nan, 1.0]])
    assert state_json(ratio) == before
