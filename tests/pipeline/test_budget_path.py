"""A time budget (``alarm.false_alarm_every``) through the pipeline: the rate-following threshold
is the same on the per-event and the batch path whatever the batching (a replay gives the same
alarms), is carried by each alarm (threshold, ``budget`` evidence) and trace point, and a
stream restored from its checkpointed state continues bit for bit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from monitor.engine.pipeline import Pipeline, RawRecord
from monitor.ops.datasets import build_example
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import decode_state, encode_state
from tests.support.pipeline_runs import assert_same, interleaved, run

#: 50 s at the example's 1 event/s: after warm-up each detector alarms at 2 · 50 · 1 = 100
#: (``min_threshold: 2``: the budget alone sets the threshold, no floor of 100 000).
BUDGET = {"rule": "shiryaev_roberts", "false_alarm_every": 50, "min_threshold": 2}
#: The covariate detector's budget (the example's own covariate_alarm would be a threshold).
COVARIATE_BUDGET = {"rule": "cusum", "false_alarm_every": "50s", "min_threshold": 2}
#: The warm-up's event-count threshold: 2 · events (50 000 by default).
WARM_UP = 2 * 50_000.0


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[bytes]]:
    return interleaved(tmp_path_factory.mktemp("budget_path"), alarm=BUDGET,
                       covariate_alarm=COVARIATE_BUDGET)


@pytest.mark.parametrize("batch", [1, 37, 5000])
def test_budgeted_batch_path_equals_the_per_event_path(
    budgeted: tuple[list[Path], list[bytes]], batch: int
) -> None:
    configs, values = budgeted
    reference = run(configs, values, 500, per_event=True)
    assert {a["detector"] for a in reference["alarms"]} == {"covariate", "conditional"}
    assert_same(run(configs, values, batch, per_event=False), reference)


def test_alarms_and_traces_carry_the_threshold_in_force_and_the_budget(
    budgeted: tuple[list[Path], list[bytes]],
) -> None:
    configs, values = budgeted
    reference = run(configs, values, 64, per_event=False)
    for alarm in reference["alarms"]:
        evidence = alarm["evidence"]
        assert evidence["budget"] == "50s" and evidence["budget_seconds"] == 50.0
        assert evidence["budget_share"] == 2 and evidence["min_threshold"] == 2.0
        assert evidence["budget_events"] == 50_000
        # Warm-up (the first 256 updates) runs on 2 · events; then the rate is 1/s (labels
        # may arrive several per second, so the conditional rate can be higher).
        if alarm["threshold"] == WARM_UP:
            assert evidence["at_events_threshold"] is True and "event_rate" not in evidence
        else:
            assert 100.0 <= alarm["threshold"] < 1_000.0
            assert evidence["event_rate"] == pytest.approx(alarm["threshold"] / 100.0)
    assert any(a["threshold"] == 100.0 for a in reference["alarms"])
    logs = {float(t.split("log_threshold=")[1].split(",")[0]) for t in reference["traces"]}
    assert math.log(WARM_UP) in logs and math.log(100.0) in logs


def test_the_default_floor_holds_a_slow_streams_threshold_at_min_threshold(
    tmp_path: Path,
) -> None:
    """Without ``min_threshold`` a time budget gets the default floor, 100 000: at 1 event/s a
    50 s budget would give 100, so after warm-up (at 2 · 50 000, the floor too) every
    threshold is the floor, and the alarm says so (``at_min_threshold``, no ``event_rate``).
    Both paths agree."""
    floored = {"rule": "shiryaev_roberts", "false_alarm_every": 50}
    configs, values = interleaved(tmp_path, alarm=floored, covariate_alarm=floored)
    reference = run(configs, values, 500, per_event=True)
    assert reference["alarms"], "the example's shifts should still be detected"
    for alarm in reference["alarms"]:
        evidence = alarm["evidence"]
        assert evidence["min_threshold"] == 100_000.0
        assert alarm["threshold"] == 100_000.0
        assert evidence["at_min_threshold"] is True and "event_rate" not in evidence
    assert any(a["threshold"] == 100_000.0 for a in reference["alarms"])
    assert_same(run(configs, values, 37, per_event=False), reference)


def records(values: list[bytes], start: int = 0) -> list[RawRecord]:
    return [RawRecord("events", 0, start + i, v, timestamp_ms=1_700_000_000_000 + start + i)
            for i, v in enumerate(values)]


def test_a_restored_stream_continues_bit_for_bit(
    budgeted: tuple[list[Path], list[bytes]],
) -> None:
    """Stop after 700 records, checkpoint every stream (encoded as the database stores it),
    restore into a new pipeline, go on: the same alarms as without the stop."""
    configs, values = budgeted
    whole = Pipeline(build_monitors(read_configs(map(str, configs))), "file:events")
    expected = [a.to_json() for a in whole.process(records(values)).alarms]

    first = Pipeline(build_monitors(read_configs(map(str, configs))), "file:events")
    got = [a.to_json() for a in first.process(records(values[:700])).alarms]
    second = Pipeline(build_monitors(read_configs(map(str, configs))), "file:events")
    for name, monitor in first.streams.items():
        second.streams[name].load_state(decode_state(*encode_state(monitor.state_dict())))
    after = [a.to_json() for a in second.process(records(values[700:], 700)).alarms]
    key = lambda a: (a["stream"], a["event_index"], a["detector"])  # noqa: E731
    assert after, "the restored streams should raise alarms"
    assert sorted(got + after, key=key) == sorted(expected, key=key)


def test_lifetime_spending_is_the_same_on_both_paths(tmp_path: Path) -> None:
    """Ville with lifetime spending: each restart lowers α_k, so the threshold moves at each
    alarm; alarms, traces and states are the same per event and in batches."""
    ville = {"rule": "ville", "alpha": 0.05, "spending": "lifetime"}
    phases = [("stable", 150), ("extreme_covariate", 300), ("concept", 450)]
    paths = build_example(tmp_path, seed=3, phases=phases, n_calibration=300, label_delay=4,
                          alarm=ville, covariate_alarm=ville)
    values = paths["events"].read_bytes().splitlines()
    reference = run([paths["config"]], values, 500, per_event=True)
    thresholds = sorted({a["threshold"] for a in reference["alarms"]})
    assert len(thresholds) >= 2, "the example should raise alarms in two segments"
    assert thresholds[0] == pytest.approx(math.pi**2 / 6 / 0.05)  # segment 1
    assert thresholds[1] == pytest.approx(4 * math.pi**2 / 6 / 0.05)  # segment 2
    for batch in (37, 5000):
        assert_same(run([paths["config"]], values, batch, per_event=False), reference)


def _without_ts(values: list[bytes], every: int) -> list[bytes]:
    """``values`` with the ``ts`` of every ``every``-th event removed (poison records kept)."""
    out = []
    for i, value in enumerate(values):
        try:
            event = json.loads(value)
        except ValueError:
            out.append(value)
            continue
        if isinstance(event, dict) and i % every == 0:
            event.pop("ts", None)
        out.append(json.dumps(event).encode() if isinstance(event, dict) else value)
    return out


@pytest.mark.parametrize("batch", [1, 37, 5000])
def test_events_without_ts_are_the_same_on_both_paths(
    budgeted: tuple[list[Path], list[bytes]], batch: int
) -> None:
    """A third of the events without ts (timed by the broker): their updates run on the
    event-count threshold on both paths, and every state (the count, the label join's marks)
    is the same."""
    configs, values = budgeted
    mixed = _without_ts(values, 3)
    reference = run(configs, mixed, 500, per_event=True)
    assert reference["alarms"]
    assert {a["threshold"] for a in reference["alarms"]} & {WARM_UP}
    for state in reference["states"].values():
        assert dict(state["mapping"])["'events_without_ts'"] > 0
    assert_same(run(configs, mixed, batch, per_event=False), reference)
