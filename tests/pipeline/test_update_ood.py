"""A configuration update with OOD on (the default) numbers the new version's OOD windows by the
stream's event index (issue 31, item 1).

The defect: the new version's OOD rule numbered its events from 0 while the batch path looked its
windows' timestamps up by the stream's event index (``batch.cov_ts[decision.end_index - first]``):
when the first window after the update closed, an ``IndexError`` made every later event of the
stream an internal-error dead letter; with batches large enough for the negative index to wrap,
the windows were stored with wrong indexes and timestamps, differing with the batch size.

The rule now (docs/operations.md, "Configuration updates"): every component numbers events by
the stream's event index, across versions. At the update the old version's partial OOD window is
closed (decided by the old rule over the events it holds, stored with the time of the last event
before the update); the new version's windows start at the update's event index. Same windows
per event, in batches of any size and across a checkpoint at any point.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from monitor.ops.datasets import build_example
from monitor.streams.calibration import Calibration
from monitor.streams.config import StreamConfig
from monitor.streams.events import PredictionEvent, decode_event
from monitor.streams.monitor import StreamMonitor
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import decode_state, encode_state
from tests.support.oracle import PerEventStream
from tests.support.streams import canonical

WINDOW = 64
TS = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[StreamConfig, list[bytes]]:
    """A stream with OOD on (windows of WINDOW predictions), labels 5 events late, an extreme
    covariate shift from event 300 (the OOD rule flags events)."""
    paths = build_example(tmp_path_factory.mktemp("update_ood"), seed=3,
                          phases=(("stable", 300), ("extreme_covariate", 300)),
                          n_calibration=300, label_delay=5)
    config = yaml.safe_load(paths["config"].read_text())
    config["ood"] = {"window": WINDOW}
    paths["config"].write_text(yaml.safe_dump(config))
    return read_configs([str(paths["config"])])[0], paths["events"].read_bytes().splitlines()


def _version2(config: StreamConfig) -> StreamConfig:
    """Version 2: another alarm threshold and another OOD level (its windows differ)."""
    return StreamConfig.model_validate({
        **config.model_dump(mode="json"),
        "alarm": {"rule": "shiryaev_roberts", "threshold": 1e5},
        "ood": {"window": WINDOW, "alpha": 0.2},
    })


def _feed(monitor: StreamMonitor, values: list[bytes], batch: int | None
          ) -> dict[str, list[dict[str, Any]]]:
    """The records of ``values`` in batches (``None``: one at a time, the per-event reference)."""
    events = [decode_event(v) for v in values]
    per_event = PerEventStream(monitor)
    got: dict[str, list[Any]] = {"alarms": [], "traces": [], "windows": []}
    for start in range(0, len(events), batch or len(events)):
        chunk = events[start : start + (batch or len(events))]
        if batch is None:
            for event in chunk:
                per_event.observe(event, TS)
        else:
            rejected = monitor.step(chunk, lambda k: TS)
            assert rejected == []
        alarms, traces, windows = monitor.drain()
        got["alarms"] += [a.to_json() for a in alarms]
        got["traces"] += [repr(t) for t in traces]
        got["windows"] += [w.to_json() for w in windows]
    return got


def _updated(config: StreamConfig, values: list[bytes], cut: int, batch: int | None = 50,
             checkpoint: bool = False) -> tuple[StreamMonitor, list[dict[str, Any]]]:
    """Version 2 taking over at line ``cut`` from version 1's state, as the worker's refresh
    does (``checkpoint``: from the state encoded as a checkpoint, as a restart does); with the
    windows version 1 stored before."""
    first = build_monitors([config])[config.name]
    before = _feed(first, values[:cut], batch)["windows"]
    state = first.state_dict()
    if checkpoint:
        state = decode_state(*encode_state(state))
    second = StreamMonitor(_version2(config), first.calibration, config_version=2)
    second.load_state(state)
    return second, before


def _predictions(values: list[bytes]) -> list[PredictionEvent]:
    return [e for e in map(decode_event, values) if isinstance(e, PredictionEvent)]


@pytest.mark.parametrize("cut", [350, 2 * WINDOW + 10, 1])
def test_windows_after_an_update_go_on_from_the_streams_event_index(
    example: tuple[StreamConfig, list[bytes]], cut: int
) -> None:
    config, values = example
    second, before = _updated(config, values, cut)
    after = _feed(second, values[cut:], 50)["windows"]
    windows = before + after
    predictions = _predictions(values)
    at_update = len(_predictions(values[:cut]))
    # Numbered by the stream's event index, without gap or overlap, across the update.
    assert [w["window_index"] for w in windows] == list(range(len(windows)))
    assert windows[0]["start_index"] == 0
    for a, b in itertools.pairwise(windows):
        assert b["start_index"] == a["end_index"] + 1
    assert windows[-1]["end_index"] < len(predictions)
    # The old version's partial window closed at the update, by its own rule; the new one's
    # windows start at the update's event index, each stored at its last event's time.
    (last_old,) = [w for w in windows if w["end_index"] == at_update - 1]
    assert last_old["alpha"] == config.ood.alpha
    assert last_old["n"] == at_update % WINDOW or WINDOW
    new = [w for w in windows if w["start_index"] >= at_update]
    assert new and all(w["alpha"] == 0.2 for w in new)
    for w in windows:
        assert datetime.fromisoformat(w["ts"]) == predictions[w["end_index"]].ts
        flagged = {e.id for e in predictions[w["start_index"] : w["end_index"] + 1]}
        assert set(w["flagged_ids"]) <= flagged
    assert any(w["flagged_ids"] for w in new)  # the shift is flagged after the update too


def test_per_event_batches_and_checkpoints_agree(
    example: tuple[StreamConfig, list[bytes]]
) -> None:
    config, values = example
    cut = 350
    reference, before = _updated(config, values, cut, batch=None)
    expected = _feed(reference, values[cut:], None)
    assert expected["windows"]
    for batch in (1, 13, WINDOW, 500, 5000):
        monitor, got_before = _updated(config, values, cut, batch=batch,
                                       checkpoint=batch == 13)
        assert got_before == before
        assert _feed(monitor, values[cut:], batch) == expected, f"batches of {batch}"
        assert canonical(monitor.state_dict()) == canonical(reference.state_dict())
    # A checkpoint at any point after the update (a restart): the same records.
    for stop in (1, 40, 300):
        first, _ = _updated(config, values, cut)
        got = _feed(first, values[cut : cut + stop], 7)
        resumed = StreamMonitor(_version2(config), first.calibration, config_version=2)
        resumed.load_state(decode_state(*encode_state(first.state_dict())))
        rest = _feed(resumed, values[cut + stop :], 7)
        assert {k: got[k] + rest[k] for k in got} == expected, f"restart {stop} after"


def test_a_second_update_goes_on_too(example: tuple[StreamConfig, list[bytes]]) -> None:
    """Version 3 over version 2's state: numbered on from version 2's last event."""
    config, values = example
    second, before = _updated(config, values, 200)
    middle = _feed(second, values[200:500], 50)["windows"]
    third = StreamMonitor(config, second.calibration, config_version=3)
    third.load_state(second.state_dict())
    after = _feed(third, values[500:], 50)["windows"]
    windows = before + middle + after
    for a, b in itertools.pairwise(windows):
        assert b["start_index"] == a["end_index"] + 1


def test_a_calibration_replaced_at_the_update(
    example: tuple[StreamConfig, list[bytes]]
) -> None:
    """Another calibration (its last 200 rows) in version 2: the same numbering."""
    config, values = example
    first = build_monitors([config])[config.name]
    _feed(first, values[:350], 50)
    rows = first.calibration.to_rows()[100:]
    second = StreamMonitor(_version2(config), Calibration.from_rows(rows), config_version=2)
    second.load_state(first.state_dict())
    windows = _feed(second, values[350:], 64)["windows"]
    at_update = len(_predictions(values[:350]))
    assert windows[0]["end_index"] == at_update - 1  # the old version's partial window
    assert windows[1]["start_index"] == at_update
