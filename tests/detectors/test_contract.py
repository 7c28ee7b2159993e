"""Contract suite: every detector class × every generic check (river's ``check_estimator``
style), parametrised with readable ids."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from monitor.core.detectors import ConditionalMonitor, CovariateMonitor
from monitor.streams.detectors import StreamDetectors
from monitor.streams.state import decode_state, encode_state
from tests.support.toy_streams import Toy, make_toy

Detector = CovariateMonitor | ConditionalMonitor | StreamDetectors
TOY = make_toy(seed=3)
SMALL: dict[str, Any] = {"threshold": 200.0, "rebaseline": 50}


def _covariate(toy: Toy, seed: int = 0, **kw: Any) -> CovariateMonitor:
    return CovariateMonitor("knn", toy.X_cal, seed=seed, **(SMALL | kw))


def _conditional(toy: Toy, seed: int = 0, **kw: Any) -> ConditionalMonitor:
    return ConditionalMonitor(toy.scores_cal, toy.X_cal, seed=seed, **(SMALL | kw))


FACTORIES: dict[str, Callable[..., Detector]] = {
    "covariate-knn": _covariate,
    "covariate-mahalanobis": lambda t, seed=0: CovariateMonitor(
        "mahalanobis", t.X_cal, seed=seed, **SMALL
    ),
    "covariate-bounded": lambda t, seed=0: _covariate(
        t, seed, max_reference=64, support_history=100
    ),
    "covariate-ville-stop": lambda t, seed=0: _covariate(t, seed, rule="ville", rebaseline=0),
    "conditional-wctm": _conditional,
    "conditional-wctm-on-signal": lambda t, seed=0: _conditional(t, seed, adapt="on_signal"),
    "conditional-ctm": lambda t, seed=0: _conditional(t, seed, weighted=False),
    "conditional-ctm-bounded": lambda t, seed=0: ConditionalMonitor(
        t.scores_cal, None, weighted=False, seed=seed, max_reference=64, **SMALL
    ),
    "conditional-cusum-jumper": lambda t, seed=0: _conditional(
        t, seed, rule="cusum", betting="composite_jumper"
    ),
    "stream-detectors": lambda t, seed=0: StreamDetectors(
        _covariate(t, seed), _conditional(t, seed)
    ),
    "stream-detectors-bounded": lambda t, seed=0: StreamDetectors(
        _covariate(t, seed, max_reference=64, support_history=100),
        ConditionalMonitor(
            t.scores_cal, None, weighted=False, seed=seed, max_reference=64, **SMALL
        ),
        history=100,
    ),
}
BOUNDED = [k for k in FACTORIES if k.endswith("bounded")]


def _step(det: Detector, toy: Toy, t: int) -> dict[str, Any]:
    """One update and what it exposes (the outputs compared between detectors)."""
    x, s = toy.X[t], float(toy.scores[t])
    if isinstance(det, CovariateMonitor):
        det.update(x)
    elif isinstance(det, ConditionalMonitor):
        det.update(x if det.weighted else None, s)
    else:
        if det.conditional.weighted:
            det.update(x, s, event_index=t)
        else:  # the unweighted CTM needs no x, the diagnosis still reads it
            det.update(x, s, event_index=t)
        return {
            "alarms": [a.to_json() for a in det.new_alarms],
            "cov": _outputs(det.covariate),
            "cond": _outputs(det.conditional),
        }
    return _outputs(det)


def _outputs(det: CovariateMonitor | ConditionalMonitor) -> dict[str, Any]:
    return {
        "alarm": det.alarm,
        "p": det.p_value,
        "log_s": det.log_martingale,
        "log_stat": det.log_statistic,
        "cp": det.changepoint,
        "n": det.n_seen,
        "phase": det.phase,
    }


def _run(det: Detector, toy: Toy, start: int, stop: int) -> list[dict[str, Any]]:
    return [_step(det, toy, t) for t in range(start, stop)]


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    # repr compares floats bit for bit and treats nan == nan.
    return repr(a) == repr(b)


def _roundtrip(det: Detector) -> Detector:
    text, blob = encode_state(det.state_dict())
    return type(det).from_state(decode_state(text, blob))


def _items(value: Any) -> int:
    """Number of stored scalars in a state (array elements, list items, leaves)."""
    if isinstance(value, np.ndarray):
        return int(value.size)
    if isinstance(value, dict):
        return sum(_items(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_items(v) for v in value) or 0
    return 1


@pytest.fixture(params=list(FACTORIES), ids=list(FACTORIES))
def factory(request: pytest.FixtureRequest) -> Callable[..., Detector]:
    return FACTORIES[request.param]


def test_raises_alarms_on_the_toy_stream(factory: Callable[..., Detector]) -> None:
    det = factory(TOY)
    outputs = _run(det, TOY, 0, len(TOY.scores))
    raised = [o for o in outputs if o.get("alarm") or o.get("alarms")]
    assert raised, "the toy shift must exercise the alarm and re-baselining paths"


def test_clone_independence(factory: Callable[..., Detector]) -> None:
    first, second = factory(TOY), factory(TOY)
    fresh = encode_state(second.state_dict())
    out_first = _run(first, TOY, 0, 600)
    assert encode_state(second.state_dict()) == fresh  # untouched by the other's updates
    assert _same(_run(second, TOY, 0, 600), out_first)
    if not isinstance(first, StreamDetectors):
        clone = first.clone()
        assert _same(_run(clone, TOY, 0, 600), out_first)


@pytest.mark.parametrize("split", [0, 1, 301, 330, 420, 899])
def test_state_round_trip_continues_bit_for_bit(
    factory: Callable[..., Detector], split: int
) -> None:
    det = factory(TOY)
    _run(det, TOY, 0, split)
    restored = _roundtrip(det)
    n = len(TOY.scores)
    assert _same(_run(restored, TOY, split, n), _run(det, TOY, split, n))
    assert encode_state(restored.state_dict()) == encode_state(det.state_dict())


def test_seeded_reproducibility(factory: Callable[..., Detector]) -> None:
    a, b, other = factory(TOY, seed=7), factory(TOY, seed=7), factory(TOY, seed=8)
    out_a = _run(a, TOY, 0, 400)
    assert _same(out_a, _run(b, TOY, 0, 400))
    assert not _same(out_a, _run(other, TOY, 0, 400))


#: Stored scalars a monitor may add to its initial state in bounded mode, whatever the stream
#: length: 2 x 64 quantization bins, 100-event histories (x 3 in StreamDetectors), a 50-event
#: warm-up window and the p-values' 256 buffered uniforms.
BUDGET = 1000


@pytest.mark.parametrize("name", BOUNDED)
def test_bounded_memory_in_bounded_mode(name: str) -> None:
    long = make_toy(seed=4, n=6000, change=3000)  # with alarms and re-baselining after 3000
    det = FACTORIES[name](long)
    initial = _items(det.state_dict())
    sizes = []
    for start in range(0, 6000, 500):
        _run(det, long, start, start + 500)
        sizes.append(_items(det.state_dict()))
    monitors = 2 if isinstance(det, StreamDetectors) else 1
    assert max(sizes) <= initial + monitors * BUDGET
    assert (det.covariate if isinstance(det, StreamDetectors) else det).n_alarms


def test_unbounded_mode_grows() -> None:
    """The counter-check: the same measure exceeds the budget without ``max_reference``."""
    long = make_toy(seed=4, n=1500, change=10_000)
    det = _covariate(long, support_history=100, threshold=1e6)
    initial = _items(det.state_dict())
    _run(det, long, 0, 1500)
    assert _items(det.state_dict()) > initial + BUDGET + 500
