"""OODDecider: windows, flush, LOND, missing inputs, persistence, defaults."""

from __future__ import annotations

import json

import numpy as np
import pytest

from monitor.core.decisions import OODDecider, WindowDecision, default_scorers
from monitor.core.ood import KNN, MSP, Energy, Mahalanobis


def _stream(seed: int, n: int, every: int = 10, shift: float = 6.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=3) + (shift if i % every == 0 else 0.0) for i in range(n)]


def _fitted(rule: str, window: int = 50, **kw: object) -> OODDecider:
    cal = {"features": np.random.default_rng(99).normal(size=(400, 3))}
    return OODDecider(rule, alpha=0.1, window=window, **kw).fit(cal)  # type: ignore[arg-type]


@pytest.mark.parametrize("rule", ["bh", "eg_bh", "lond"])
def test_windows_summaries_and_flags(rule: str) -> None:
    decider = _fitted(rule, window=50)
    for i, x in enumerate(_stream(0, 120)):
        decider.add(f"e-{i}", {"features": x})
    finished = decider.windows()
    assert [(w.start_index, w.end_index, w.n) for w in finished] == [(0, 49, 50), (50, 99, 50)]
    assert decider.windows() == []  # drained
    last = decider.flush()
    assert last is not None and (last.start_index, last.end_index, last.n) == (100, 119, 20)
    assert decider.flush() is None
    for w in [*finished, last]:
        assert w.rule == rule and w.alpha == 0.1 and w.n_flagged == len(w.flagged_ids)
        assert set(w.flagged_ids) <= {f"e-{i}" for i in range(w.start_index, w.end_index + 1)}
        json.dumps(w.to_json())
    if rule != "lond":  # LOND's per-window levels are too small to find 5 signals among 50
        assert finished[0].flagged_ids == tuple(f"e-{i}" for i in range(0, 50, 10))
        assert finished[0].threshold == pytest.approx(0.1 * 5 / 50)


def test_lond_flags_online_with_a_large_calibration_set() -> None:
    rng = np.random.default_rng(1)
    decider = OODDecider("lond", alpha=0.1, window=20).fit({"features": rng.normal(size=(3000, 2))})
    decider.add("far", {"features": np.array([9.0, 9.0])})  # first event: level alpha/H_20
    decider.add("near", {"features": np.array([0.0, 0.0])})
    decision = decider.flush()
    assert decision is not None and decision.flagged_ids == ("far",)
    assert decision.threshold == pytest.approx(0.1 * 2 / (2 * sum(1 / j for j in range(1, 21))))


def test_state_round_trip_mid_window_gives_identical_decisions() -> None:
    for rule in ("eg_bh", "lond"):
        a = _fitted(rule, window=40)
        events = _stream(2, 70)
        for i, x in enumerate(events[:55]):
            a.add(f"e-{i}", {"features": x})
        state = a.state_dict()
        b = OODDecider.from_state(json.loads(json.dumps(state, default=_to_list)))
        for i, x in enumerate(events[55:], start=55):
            a.add(f"e-{i}", {"features": x})
            b.add(f"e-{i}", {"features": x})
        assert a.windows() == b.windows()
        assert a.flush() == b.flush()


def _to_list(obj: object) -> object:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(type(obj))


def test_missing_input_raises_and_names_the_kind() -> None:
    decider = OODDecider("bh", scorers=[Energy()]).fit({"logits": np.zeros((10, 3))})
    with pytest.raises(ValueError, match="reads 'logits', missing from the event 'e-1'"):
        decider.add("e-1", {"features": np.zeros(3)})
    with pytest.raises(ValueError, match="missing from the calibration"):
        OODDecider("bh", scorers=[MSP()]).fit({"features": np.zeros((10, 3))})
    with pytest.raises(RuntimeError, match="fitted"):
        OODDecider().add("e", {"features": np.zeros(3)})


def test_default_scorers_follow_the_available_inputs() -> None:
    both = default_scorers(["features", "logits", "embedding"])
    assert [(s.name, s.input, s.k) for s in both] == [("knn", "embedding", 1)]  # type: ignore[attr-defined]
    assert [s.name for s in default_scorers(["features", "logits"])] == ["energy"]
    tab = default_scorers(["features"])
    assert [(s.name, s.input) for s in tab] == [("knn", "features")]
    assert tab[0].get_params() == {**tab[0].get_params(), "k": 1, "standardize": True}
    with pytest.raises(ValueError, match="at least one of"):
        default_scorers([])


def test_runs_splits_and_prefitted_scorers() -> None:
    rng = np.random.default_rng(3)
    cal = {"features": rng.normal(size=(200, 4))}
    tabular = [KNN(k=5, standardize=True, normalize=False), Mahalanobis(standardize=True)]
    eg = OODDecider("eg_bh", scorers=tabular, splits=4, conformal="split").fit(cal)
    assert eg.p_values(cal).shape == (8, 200)  # knn + mahalanobis, 4 splits each
    split_bh = OODDecider("bh", scorers=tabular, splits=4, conformal="split")
    assert split_bh.fit(cal).p_values(cal).shape == (1, 200)
    # Held-out calibration: 100 scores per split run, so p-values are multiples of 1/101.
    scaled = eg.p_values({"features": rng.normal(size=(5, 4))}) * 101
    np.testing.assert_allclose(scaled, np.round(scaled), atol=1e-9)
    prefit = KNN(k=3, standardize=True, normalize=False).fit(rng.normal(size=(500, 4)))
    mixed = OODDecider("eg_bh", scorers=[prefit, Mahalanobis(standardize=True)], splits=3)
    P = mixed.fit(cal).p_values({"features": rng.normal(size=(5, 4))})
    assert P.shape == (4, 5)  # 1 run for the pre-fitted KNN (all 200 rows calibrate) + 3
    np.testing.assert_allclose(P[0] * 201, np.round(P[0] * 201), atol=1e-9)


def test_full_conformal_knn_is_one_run_on_every_calibration_row() -> None:
    rng = np.random.default_rng(4)
    cal = {"features": rng.normal(size=(200, 4))}
    tabular = [KNN(k=5, standardize=True, normalize=False), Mahalanobis(standardize=True)]
    eg = OODDecider("eg_bh", scorers=tabular, splits=4).fit(cal)  # conformal="full"
    P = eg.p_values({"features": rng.normal(size=(5, 4))})
    assert P.shape == (5, 5)  # 1 full-conformal KNN run + 4 Mahalanobis splits
    np.testing.assert_allclose(P[0] * 201, np.round(P[0] * 201), atol=1e-9)  # all m rows rank
    restored = OODDecider.from_state(eg.state_dict())
    np.testing.assert_array_equal(
        restored.p_values({"features": cal["features"][:7]}),
        eg.p_values({"features": cal["features"][:7]}),
    )
    with pytest.raises(ValueError, match="conformal must be one of"):
        OODDecider(conformal="jackknife")


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="rule must be one of"):
        OODDecider("storey")
    with pytest.raises(ValueError, match="window must be"):
        OODDecider(window=0)
    with pytest.raises(ValueError, match="fit_fraction"):
        OODDecider(fit_fraction=1.0)
    with pytest.raises(ValueError, match="too few"):
        OODDecider(scorers=[KNN(k=1)], conformal="split").fit({"embedding": np.ones((1, 2))})
    with pytest.raises(ValueError, match="at least 2 rows"):
        OODDecider(scorers=[KNN(k=1)]).fit({"embedding": np.ones((1, 2))})
    assert WindowDecision(0, 0, 1, 0, 0.0, "bh", 0.1, ()).to_json()["flagged_ids"] == []


def test_bad_events_are_rejected_on_arrival_not_at_window_close() -> None:
    decider = _fitted("eg_bh", window=3)
    decider.add("ok", {"features": np.zeros(3), "logits": np.full(2, np.nan)})  # unused kind
    with pytest.raises(ValueError, match="features of 'wide' has 4 columns"):
        decider.add("wide", {"features": np.zeros(4)})
    with pytest.raises(ValueError, match="NaN"):
        decider.add("nan", {"features": np.array([0.0, np.nan, 0.0])})
    decider.add("ok2", {"features": np.zeros(3)})
    decider.add("ok3", {"features": np.zeros(3)})
    assert [w.n for w in decider.windows()] == [3]
