"""OODDecider.add_many: the same windows and state as add() row by row, for every rule."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from monitor.core.decisions import OODDecider
from monitor.core.ood import KNN

N_EVENTS = 1234  # ends mid-window
WINDOW = 100
RULES = ("eg_bh", "bh", "lond")


def _features(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    X = rng.normal(size=(n, 4)) * [1.0, 2.0, 0.5, 3.0] + [0.0, 1.0, -2.0, 5.0]
    return {"features": X}


def _logits(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    labels = rng.integers(0, 3, size=n)
    logits = rng.normal(size=(n, 3))
    logits[np.arange(n), labels] += 3.0
    return {"logits": logits, "features": rng.normal(size=(n, 2))}


def _embedding(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {"embedding": rng.normal(size=(n, 16)) + 0.5}


SOURCES: dict[str, Callable[[np.random.Generator, int], dict[str, np.ndarray]]] = {
    "tabular": _features,
    "logits": _logits,
    "embedding": _embedding,
}


def _shifted(inputs: dict[str, np.ndarray], every: int = 13) -> dict[str, np.ndarray]:
    """Every ``every``-th event moved far from the calibration data (OOD, so some flags)."""
    out = {kind: X.copy() for kind, X in inputs.items()}
    for kind, X in out.items():
        if kind == "logits":  # flat logits: low confidence
            X[::every] = 0.01 * X[::every]
        elif kind == "embedding":  # against the calibration's mean direction
            X[::every] = -X[::every] - 2.0
        else:
            X[::every] += 6.0 * np.sign(X[::every] + 0.1)
    return out


def _case(source: str, rule: str, **kw: Any) -> tuple[OODDecider, list[str], dict[str, Any]]:
    rng = np.random.default_rng(7)
    make = SOURCES[source]
    decider = OODDecider(rule, alpha=0.1, window=WINDOW, splits=3, seed=1, **kw)
    decider.fit(make(rng, 300))
    events = _shifted(make(rng, N_EVENTS))
    ids = [f"e-{i}" for i in range(N_EVENTS)]
    return decider, ids, events


def _by_add(decider: OODDecider, ids: Sequence[str], events: Mapping[str, np.ndarray]) -> None:
    for i, event_id in enumerate(ids):
        decider.add(event_id, {kind: X[i] for kind, X in events.items()})


def _by_batches(
    decider: OODDecider,
    ids: Sequence[str],
    events: Mapping[str, np.ndarray],
    cuts: Sequence[int],
) -> None:
    bounds = [0, *cuts, len(ids)]
    for a, b in itertools.pairwise(bounds):
        decider.add_many(ids[a:b], {kind: X[a:b] for kind, X in events.items()})


def _cuts(splitting: str | int, n: int) -> list[int]:
    if splitting == "random":
        rng = np.random.default_rng(3)
        return sorted(set(rng.integers(1, n, size=40).tolist()))
    assert isinstance(splitting, int)
    return list(range(splitting, n, splitting))


def assert_same_state(a: Any, b: Any, path: str = "state") -> None:
    """Deep equality of two ``state_dict()``s: arrays by dtype, shape and every bit."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), path
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert a.tobytes() == b.tobytes(), path
    elif isinstance(a, Mapping):
        assert isinstance(b, Mapping) and list(a) == list(b), path
        for key in a:
            assert_same_state(a[key], b[key], f"{path}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{path}[{i}]")
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"


def _windows_as_bits(decider: OODDecider) -> list[tuple[Any, ...]]:
    """Every field of every finished window, the threshold as its bits."""
    return [
        (
            w.start_index,
            w.end_index,
            w.n,
            w.n_flagged,
            w.threshold.hex(),
            w.rule,
            w.alpha,
            w.flagged_ids,
        )
        for w in decider.windows()
    ]


@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("rule", RULES)
def test_add_many_equals_add_row_by_row(source: str, rule: str) -> None:
    reference, ids, events = _case(source, rule)
    _by_add(reference, ids, events)
    ref_state = reference.state_dict()
    ref_windows = _windows_as_bits(reference)
    ref_flush = reference.flush()
    assert len(ref_windows) == N_EVENTS // WINDOW
    assert sum(len(w[-1]) for w in ref_windows) > 0  # the test can see flags differ
    for splitting in (1, 37, 5000, "random"):
        decider, _, _ = _case(source, rule)
        _by_batches(decider, ids, events, _cuts(splitting, N_EVENTS))
        assert_same_state(decider.state_dict(), ref_state, f"state[{splitting}]")
        assert _windows_as_bits(decider) == ref_windows, splitting
        assert decider.flush() == ref_flush, splitting


@pytest.mark.parametrize("rule", RULES)
def test_from_state_mid_window_then_add_many_continues_identically(rule: str) -> None:
    reference, ids, events = _case("tabular", rule)
    _by_add(reference, ids, events)
    decider, _, _ = _case("tabular", rule)
    _by_batches(decider, ids[:555], {k: X[:555] for k, X in events.items()}, [250])
    state = json.loads(json.dumps(decider.state_dict(), default=_to_list))
    restored = OODDecider.from_state(state)
    _by_batches(restored, ids[555:], {k: X[555:] for k, X in events.items()}, [45, 300])
    # The 5 windows closed before the checkpoint travel in its "finished" list.
    assert_same_state(restored.state_dict(), reference.state_dict())
    assert _windows_as_bits(restored) == _windows_as_bits(reference)
    assert restored.flush() == reference.flush()


def _to_list(obj: object) -> object:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(type(obj))


def test_add_and_add_many_interleave() -> None:
    reference, ids, events = _case("embedding", "eg_bh", scorers=[KNN(k=3)])
    _by_add(reference, ids, events)
    decider, _, _ = _case("embedding", "eg_bh", scorers=[KNN(k=3)])
    for a in range(0, N_EVENTS, 60):
        decider.add(ids[a], {k: X[a] for k, X in events.items()})
        decider.add_many(ids[a + 1 : a + 60], {k: X[a + 1 : a + 60] for k, X in events.items()})
    assert _windows_as_bits(decider) == _windows_as_bits(reference)
    assert_same_state(decider.state_dict(), reference.state_dict())


def test_bad_batches_name_the_event_and_add_nothing() -> None:
    decider, ids, events = _case("tabular", "eg_bh")
    X = events["features"][:5].copy()
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="features of 'e-3' contains NaN"):
        decider.add_many(ids[:5], {"features": X})
    with pytest.raises(ValueError, match="features of 'e-0' has 5 columns"):
        decider.add_many(ids[:5], {"features": np.zeros((5, 5))})
    with pytest.raises(ValueError, match=r"must be a \(5, 4\) matrix"):
        decider.add_many(ids[:5], {"features": np.zeros((4, 4))})
    with pytest.raises(ValueError, match="reads 'features', missing from the batch"):
        decider.add_many(ids[:5], {"logits": np.zeros((5, 4))})
    assert decider.state_dict()["next_index"] == 0 and decider.state_dict()["pending_ids"] == []
    decider.add_many([], {})
    with pytest.raises(RuntimeError, match="fitted"):
        OODDecider().add_many(["e"], {"features": np.zeros((1, 3))})


def test_add_many_copies_its_rows() -> None:
    decider, ids, events = _case("tabular", "bh")
    X = events["features"][:30].copy()
    decider.add_many(ids[:30], {"features": X})
    X[:] = 0.0  # a caller reusing its buffer
    np.testing.assert_array_equal(
        decider.state_dict()["pending_inputs"]["features"], events["features"][:30]
    )
