"""Soak: in bounded mode (``max_reference``, unweighted conditional monitor) the stream's state,
the worker's memory and its checkpoint stop growing however long the replay; the database grows
linearly (trace points, OOD windows), never faster.

CI checks the state size deterministically, in process, at OOD-window boundaries of one replay.
The ``slow`` test runs ``bench/soak.py`` (``monitor run`` in its own process, sampled for RSS and
database sizes); the long runs behind docs/operations.md are that script's command lines.

What still grows in bounded mode, by design: the label store up to ``labels.max_pending``, the
diagnosis history up to 10 000 events per detector, the stored trace points (one per
``trace_every`` events per detector) and OOD windows. The weighted conditional monitor (WATCH,
``weighted: true``, the default) is bounded by ``reference_window`` instead of ``max_reference``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import Engine

from connectors import FileSource
from monitor.engine.pipeline import Pipeline
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import encode_state
from tests.support.databases import postgres_database

ROOT = Path(__file__).resolve().parents[2]
WINDOW = 256  # OOD window (default): measured at window boundaries, where its buffer is empty


def load_soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_soak", ROOT / "bench" / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_soak"] = module
    spec.loader.exec_module(module)
    return module


def state_sizes(folder: Path, config: dict[str, Any], at: list[int]) -> dict[int, dict[str, int]]:
    """Encoded size of the stream's state, in total and per part (``detectors.covariate.
    p_values``, ...), after each number of predictions in ``at``."""
    soak = load_soak()
    events, config_path = soak.write_replay(folder, at[-1], label_delay=0, n_calibration=1000,
                                            seed=0, config=config)
    monitors = build_monitors(read_configs([str(config_path)]))
    monitor = monitors[soak.STREAM]
    pipeline = Pipeline(monitors, "soak")
    sizes: dict[int, dict[str, int]] = {}
    with FileSource(events) as source:
        for stop in at:
            pipeline.process(source.poll(stop - monitor.event_index))
            assert monitor.event_index == stop
            state = monitor.state_dict()
            sizes[stop] = {"total": _size(state), **_parts(state)}
    return sizes


@pytest.mark.slow  # two replays of 4 096 events (~1 min on a shared machine)
def test_weighted_reference_window_stops_growing(tmp_path: Path) -> None:
    """The weighted conditional monitor's state (reference and density ratio) is the same size
    after 8 and 16 OOD windows once its reference_window (100) is full; unbounded, it grows."""
    at = [WINDOW * 8, WINDOW * 16]
    part = "detectors.conditional.p_values"
    bounded = state_sizes(tmp_path / "bounded", {"reference_window": 100}, at)
    assert bounded[at[1]][part] <= 1.02 * bounded[at[0]][part]
    unbounded = state_sizes(tmp_path / "unbounded", {"reference_window": None}, at)
    assert unbounded[at[1]][part] >= 1.2 * unbounded[at[0]][part]


def _parts(state: dict[str, Any], prefix: str = "", depth: int = 3) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, value in state.items():
        if isinstance(value, dict) and depth > 1:
            out |= _parts(value, f"{prefix}{key}.", depth - 1)
        else:
            out[prefix + key] = _size(value)
    return out


def _size(state: Any) -> int:
    text, blob = encode_state({"s": state})
    return len(text) + len(blob or b"")


REFERENCES = ("detectors.covariate.p_values", "detectors.conditional.p_values")


@pytest.mark.parametrize(("config", "bounded"), [
    ({"max_reference": 100, "weighted": False}, True),
    ({"weighted": False}, False),  # the control: the same replay without max_reference
], ids=["max_reference", "unbounded"])
def test_bounded_references_stop_growing(tmp_path: Path, config: dict[str, Any],
                                         bounded: bool) -> None:
    at = [WINDOW * 8, WINDOW * 16]
    sizes = state_sizes(tmp_path, config, at)
    for part in REFERENCES:
        growth = sizes[at[1]][part] / sizes[at[0]][part]
        assert (growth <= 1.02) if bounded else (growth >= 1.5), (part, growth)
    # Everything else that grows is a history capped at 10 000 events (slow test below), or the
    # open performance window (at most ``performance.window`` labelled events: it may be fuller
    # at one point than at the other).
    before, after = sizes[at[0]], sizes[at[1]]
    growing = {k for k in before if after[k] > 1.02 * before[k] and after[k] - before[k] > 64}
    growing.discard("total")
    growing -= {"performance.indexes", "performance.predictions", "performance.labels"}
    expected = {"detectors.covariate.support", "detectors.cov_events.indices",
                "detectors.cond_events.indices", "detectors.cond_outside",
                "detectors.cond_penalised",
                # the ids the label join has joined, capped like the label store
                # (labels.max_pending) so that a replay never processes an event twice
                "join.joined.ids", "join.joined.ts"}
    assert growing == (expected if bounded else expected | set(REFERENCES)), growing


@pytest.mark.slow
def test_bounded_state_plateaus_past_the_histories(tmp_path: Path) -> None:
    at = [WINDOW * k for k in (40, 48, 56, 64)]  # past the 10 000-event histories
    sizes = state_sizes(tmp_path, {"max_reference": 100, "weighted": False}, at)
    totals = [sizes[n]["total"] for n in at]
    # Floats are JSON text of varying length (and a re-baseline after a false alarm moves a few
    # hundred scores): 3 % slack, and no trend.
    assert max(totals) <= 1.03 * min(totals), totals
    assert totals[-1] <= 1.01 * totals[1], totals


@pytest.mark.slow
@pytest.mark.postgres
def test_worker_memory_and_database_stay_bounded(tmp_path: Path,
                                                 postgres_admin: Engine) -> None:
    soak = load_soak()
    with postgres_database(postgres_admin) as url:
        result = soak.soak(url, tmp_path, 150_000, {"max_reference": 500, "weighted": False},
                           label_delay=10, interval_s=2.0)
    assert result.exit_code == 0
    summary = result.summary()
    print(summary)
    assert summary["rss_mb_growth_per_100k_second_half"] < 20, summary
    assert summary["checkpoint_kb_at_end"] <= 1.1 * summary["checkpoint_kb_at_half"], summary
    # Linear database growth: trace points (2 per 10 events), OOD windows, checkpoint versions
    # awaiting autovacuum; a few kB per thousand events, not a quadratic blow-up.
    assert summary["db_kb_per_1k_events_second_half"] < 1000, summary
