"""``update_batch`` equals repeated per-event updates bit for bit: traces, alarms (with the
properties read inside ``on_alarm``) and the whole state afterwards, for any batch splitting."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.core.detectors.base import AlarmEvent

N = 1400
SPLITS = ("one", "37", "all", "random")


def _stream(seed: int = 0, ties: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    X_cal = rng.normal(size=(300, 3))
    X = rng.normal(size=(N, 3))
    X[500:, 0] += 1.5  # covariate shift (some inputs leave the calibration support)
    X[1000:, 1] -= 2.5
    s_cal = np.abs(rng.normal(size=300))
    s = np.abs(rng.normal(size=N))
    s[700:] *= 1.8  # the model gets worse, twice: conditional alarms
    s[1100:] *= 1.8
    if ties:  # classification-like scores 1 − p̂(y|x) on a coarse grid
        s_cal = np.round(np.minimum(s_cal / 3.0, 1.0), 1)
        s = np.round(np.minimum(s / 3.0, 1.0), 1)
    return {"X_cal": X_cal, "X": np.ascontiguousarray(X), "s_cal": s_cal, "s": s}


def _bounds(split: str, n: int, seed: int) -> list[int]:
    if split == "one":
        return list(range(n + 1))
    if split == "37":
        return [*range(0, n, 37), n]
    if split == "all":
        return [0, n]
    rng = np.random.default_rng(seed)
    cuts = np.unique(rng.integers(0, n, size=40))
    return sorted({0, n, *cuts.tolist()})


def _assert_state_equal(a: Any, b: Any, path: str = "") -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            _assert_state_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_state_equal(x, y, f"{path}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, path
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), path
    elif isinstance(a, float) and np.isnan(a):
        assert isinstance(b, float) and np.isnan(b), path
    else:
        assert type(a) is type(b) and a == b, path


PROPS = ("p_value", "log_martingale", "log_statistic")
COND_PROPS = (*PROPS, "weights_ess", "penalised")


def _inside(monitor: Any) -> tuple[Any, ...]:
    """What a caller reads inside on_alarm."""
    common = (monitor.n_seen, monitor.phase, monitor.statistic, monitor.changepoint,
              monitor.last_alarms, monitor.n_alarms, monitor.state_dict())
    if isinstance(monitor, CovariateMonitor):
        cp = monitor.changepoint
        return (*common, monitor.outside_fraction(cp), monitor.outside_fraction(cp - 50, cp))
    return (*common, monitor.penalised_fraction, monitor.weights_ess, monitor.adapting,
            monitor.n_reference)


def _run_both(
    make: Callable[[], Any], step: Callable[[Any, int], None],
    batch: Callable[[Any, int, int, Any], Any], split: str, seed: int = 1,
    on_alarm: Callable[[Any], None] | None = None, n: int = N, cuts: tuple[int, ...] = (),
) -> tuple[Any, Any]:
    conditional = isinstance(make(), ConditionalMonitor)
    props = COND_PROPS if conditional else PROPS
    ref = make()
    expected = np.empty((n, len(props)))
    alarms: list[tuple[int, AlarmEvent, tuple[Any, ...]]] = []
    batch_alarms: list[AlarmEvent] = []
    bounds = sorted({*_bounds(split, n, seed), *cuts})
    for i in range(n):
        if i in bounds:
            batch_alarms = []
        step(ref, i)
        expected[i] = [getattr(ref, p) for p in props]
        if ref.alarm:
            (event,) = ref.last_alarms
            alarms.append((i, event, _inside(ref)))
            batch_alarms.append(event)
            if on_alarm is not None:
                on_alarm(ref)
    ref._last_alarms = tuple(batch_alarms)  # a batch reports every alarm it raised

    got = make()
    seen: list[tuple[int, AlarmEvent, tuple[Any, ...]]] = []
    traces = []
    for a, b in itertools.pairwise(bounds):
        def callback(i: int, event: AlarmEvent, a: int = a) -> None:
            seen.append((a + i, event, _inside(got)))
            if on_alarm is not None:
                on_alarm(got)

        trace = batch(got, a, b, callback)
        traces.append(np.column_stack([getattr(trace, p) for p in props]))
    trace_all = np.concatenate(traces)
    assert trace_all.shape == expected.shape
    mismatch = np.flatnonzero(~np.all((trace_all == expected)
                                      | (np.isnan(trace_all) & np.isnan(expected)), axis=1))
    assert mismatch.size == 0, f"first mismatch at {mismatch[:3]}"
    assert [(i, e) for i, e, _ in seen] == [(i, e) for i, e, _ in alarms]
    for (_, _, x), (_, _, y) in zip(seen, alarms, strict=True):
        _assert_state_equal(list(x), list(y))
    _assert_state_equal(got.state_dict(), ref.state_dict())
    return ref, got


COVARIATE_CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "ville": {"rule": "ville", "alpha": 0.05},
    "cusum": {"rule": "cusum", "threshold": 30.0},
    "max_reference": {"max_reference": 40},
    "rebaseline0": {"rebaseline": 0},
    "mixture": {"betting": "mixture"},
    "power": {"betting": "power"},
    "simple_jumper": {"betting": "simple_jumper"},
    "agrapa": {"betting": "agrapa"},
    "plug_in_power": {"betting": "plug_in_power"},
}


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("config", list(COVARIATE_CONFIGS))
def test_covariate_batches_equal_per_event_updates(config: str, split: str) -> None:
    data = _stream()
    kw = {"threshold": 200.0, "rebaseline": 80, **COVARIATE_CONFIGS[config]}

    def make() -> CovariateMonitor:
        return CovariateMonitor("knn", data["X_cal"], **kw)

    ref, _ = _run_both(
        make, lambda m, i: m.update(data["X"][i]),
        lambda m, a, b, cb: m.update_batch(data["X"][a:b], on_alarm=cb), split,
    )
    assert ref.n_alarms >= (1 if config in ("rebaseline0", "ville") else 2)


def test_covariate_batches_use_prepared_scores() -> None:
    data = _stream(3)

    def make() -> CovariateMonitor:
        return CovariateMonitor("knn", data["X_cal"], threshold=200.0, rebaseline=80)

    def batch(m: CovariateMonitor, a: int, b: int, cb: Any) -> Any:
        m.prepare(data["X"][a : b + 5])  # a few rows of the next batch too
        return m.update_batch(data["X"][a:b], on_alarm=cb)

    _run_both(make, lambda m, i: m.update(data["X"][i]), batch, "random")


CONDITIONAL_CONFIGS: dict[str, dict[str, Any]] = {
    "default": {},
    "ville": {"rule": "ville", "alpha": 0.05},
    "cusum": {"rule": "cusum", "threshold": 30.0},
    "unweighted": {"weighted": False},
    "max_reference": {"weighted": False, "max_reference": 40},
    "on_signal": {"adapt": "on_signal"},
    "rebaseline0": {"rebaseline": 0},
    "jumper": {"betting": "composite_jumper"},
    "power_raw": {"betting": "power", "ratio_features": "raw", "batch_size": 70},
    "agrapa": {"betting": "agrapa"},
    "plug_in_power": {"betting": "plug_in_power"},
    "ties": {},
    "window": {"reference_window": 30},
    "window_on_signal": {"reference_window": 30, "adapt": "on_signal"},
}


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("config", list(CONDITIONAL_CONFIGS))
def test_conditional_batches_equal_per_event_updates(config: str, split: str) -> None:
    data = _stream(ties=config == "ties")
    kw = {"threshold": 200.0, "rebaseline": 80, **CONDITIONAL_CONFIGS[config]}

    def make() -> ConditionalMonitor:
        return ConditionalMonitor(data["s_cal"], data["X_cal"], **kw)

    X = data["X"] if kw.get("weighted", True) else None
    ref, _ = _run_both(
        make, lambda m, i: m._update_row(data["X"][i : i + 1], data["s"][i]),
        lambda m, a, b, cb: m.update_batch(None if X is None else X[a:b], data["s"][a:b],
                                           on_alarm=cb),
        split,
        # WATCH's adaptation start on a signal, requested from inside the callback
        on_alarm=(lambda m: m.start_adaptation()) if config == "on_signal" else None,
    )
    assert ref.n_alarms >= (1 if config in ("rebaseline0", "ville") else 2)


def test_conditional_adaptation_between_batches() -> None:
    data = _stream(5)

    def make() -> ConditionalMonitor:
        return ConditionalMonitor(data["s_cal"], data["X_cal"], adapt="on_signal",
                                  threshold=200.0, rebaseline=80)

    def step(m: ConditionalMonitor, i: int) -> None:
        if i == 555:
            m.start_adaptation()
        m._update_row(data["X"][i : i + 1], data["s"][i])

    def batch(m: ConditionalMonitor, a: int, b: int, cb: Any) -> Any:
        if a == 555:
            m.start_adaptation()
        return m.update_batch(data["X"][a:b], data["s"][a:b], on_alarm=cb)

    ref, _ = _run_both(make, step, batch, "37", cuts=(555,))  # batches of 37, a cut at 555
    assert ref.n_alarms >= 1


def test_empty_batch() -> None:
    data = _stream()
    cov = CovariateMonitor("knn", data["X_cal"])
    trace = cov.update_batch(np.empty((0, 3)))
    assert trace.p_value.size == 0 and cov.n_seen == 0 and cov.last_alarms == ()
    con = ConditionalMonitor(data["s_cal"], data["X_cal"])
    trace = con.update_batch(np.empty((0, 3)), np.empty(0))
    assert trace.weights_ess is not None and trace.weights_ess.size == 0 and con.n_seen == 0


def test_restored_monitor_continues_in_batches() -> None:
    data = _stream(7)
    cov = CovariateMonitor("knn", data["X_cal"], threshold=200.0, rebaseline=80)
    con = ConditionalMonitor(data["s_cal"], data["X_cal"], threshold=200.0, rebaseline=80)
    cov.update_batch(data["X"][:650])
    con.update_batch(data["X"][:650], data["s"][:650])
    cov2 = CovariateMonitor.from_state(cov.state_dict())
    con2 = ConditionalMonitor.from_state(con.state_dict())
    for i in range(650, N):
        cov.update(data["X"][i])
        con._update_row(data["X"][i : i + 1], data["s"][i])
    for a in range(650, N, 113):
        cov2.update_batch(data["X"][a : a + 113])
        con2.update_batch(data["X"][a : a + 113], data["s"][a : a + 113])
    assert cov.n_alarms >= 2 and con.n_alarms >= 2
    for x, y in ((cov, cov2), (con, con2)):
        sx, sy = x.state_dict(), y.state_dict()
        sx["monitor"].pop("last_alarms"), sy["monitor"].pop("last_alarms")
        _assert_state_equal(sy, sx)


def test_bad_inputs_are_rejected() -> None:
    data = _stream()
    cov = CovariateMonitor("knn", data["X_cal"])
    with pytest.raises(ValueError, match="shape"):
        cov.update_batch(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        cov.update_batch(np.full((3, 3), np.nan))
    con = ConditionalMonitor(data["s_cal"], data["X_cal"])
    with pytest.raises(ValueError, match="features"):
        con.update_batch(None, np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        con.update_batch(np.zeros((2, 3)), np.array([0.1, np.nan]))


def test_quantile_batch_transform_equals_per_row() -> None:
    from monitor.core.detectors.conditional import QuantileNormalizer

    rng = np.random.default_rng(2)
    cal = np.round(rng.normal(size=(200, 4)), 1)  # ties
    q = QuantileNormalizer(cal)
    X = np.vstack([np.round(rng.normal(size=(300, 4)) * 2, 1), cal[:20], [[-0.0] * 4],
                   [[1e300, -1e300, 0.0, 5.0]]])
    batch = q(X)
    one = np.vstack([q._one(row) for row in X])
    assert batch.tobytes() == one.tobytes()
    assert QuantileNormalizer.load(q.state())(X).tobytes() == batch.tobytes()


@pytest.mark.parametrize("weighted", [True, False])
def test_per_event_fallback_equals_per_event_updates(
    monkeypatch: pytest.MonkeyPatch, weighted: bool
) -> None:
    """The exact per-event steps used for a betting function without a compiled step."""
    from monitor.core.martingales import batch

    monkeypatch.setattr(batch, "supports_betting", lambda betting: False)
    data = _stream(9)
    kw = {"threshold": 200.0, "rebaseline": 80}
    _run_both(
        lambda: CovariateMonitor("knn", data["X_cal"], **kw),
        lambda m, i: m.update(data["X"][i]),
        lambda m, a, b, cb: m.update_batch(data["X"][a:b], on_alarm=cb), "random",
    )
    X = data["X"] if weighted else None
    _run_both(
        lambda: ConditionalMonitor(data["s_cal"], data["X_cal"], weighted=weighted, **kw),
        lambda m, i: m._update_row(data["X"][i : i + 1], data["s"][i]),
        lambda m, a, b, cb: m.update_batch(None if X is None else X[a:b], data["s"][a:b],
                                           on_alarm=cb),
        "random",
    )
