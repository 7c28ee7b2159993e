"""Alarm revisions through the pipeline: the per-event and batch paths give the same records, a
revision keeps its alarm's id, event and time, and a checkpoint taken while an alarm waits for
its evidence (encoded as the worker stores it) resumes to the same revision."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.ops.datasets import build_example
from monitor.streams.events import decode_event
from monitor.streams.monitor import StreamMonitor
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import decode_state, encode_state
from tests.support.pipeline_runs import run

MIN_EVENTS = 15


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    """Frequent Ville alarms (alpha 0.5) and a short re-baseline (20 events): alarms right after
    each resume have fewer than MIN_EVENTS events of evidence."""
    folder = tmp_path_factory.mktemp("revisions")
    paths = build_example(folder, seed=4, phases=(("stable", 150), ("extreme_covariate", 250)),
                          n_calibration=300, label_delay=7, alarm={"rule": "ville", "alpha": 0.5})
    config = yaml.safe_load(paths["config"].read_text())
    config |= {"rebaseline": 20, "diagnosis": {"min_events": MIN_EVENTS}}
    paths["config"].write_text(yaml.safe_dump(config))
    return paths["config"], paths["events"].read_bytes().splitlines()


def test_batch_path_gives_the_same_revisions(example: tuple[Path, list[bytes]]) -> None:
    config, values = example
    reference = run([config], values, 500, per_event=True)
    alarms = reference["alarms"]
    revised = [a for a in alarms if a["revision"] == 2]
    assert revised, "the example should revise alarms"
    first = {a["id"]: a for a in alarms if a["revision"] == 1}
    for alarm in revised:
        original = first[alarm["id"]]
        assert original["kind"] == "insufficient_evidence"
        assert alarm["kind"] != "insufficient_evidence"
        for key in ("event_id", "event_index", "ts", "changepoint", "statistic", "detector"):
            assert alarm[key] == original[key]
        assert alarm["revised_at"] >= alarm["ts"]
        assert alarm["evidence"]["evidence_events"] == MIN_EVENTS
    for batch in (13, 5000):
        got = run([config], values, batch, per_event=False)
        assert got["alarms"] == alarms
        assert got["states"] == reference["states"]


def _monitor(config: Path) -> StreamMonitor:
    (monitor,) = build_monitors(read_configs([str(config)])).values()
    return monitor


def _feed(monitor: StreamMonitor, values: list[bytes]) -> list[dict[str, Any]]:
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    monitor.step([decode_event(v) for v in values], lambda k: ts)
    return [a.to_json() for a in monitor.drain()[0]]


def test_a_checkpoint_between_an_alarm_and_its_revision(example: tuple[Path, list[bytes]]
                                                        ) -> None:
    config, values = example
    reference = _monitor(config)
    alarms = _feed(reference, values)
    pending = next(a for a in alarms if a["kind"] == "insufficient_evidence")
    # cut right after the record that raised it: its prediction (covariate) or its label
    kind = b'"kind":"label"' if pending["detector"] == "conditional" else b'"kind":"prediction"'
    raised_by = next(v for v in values if pending["event_id"].encode() in v and kind in v)
    cut = values.index(raised_by) + 1
    first = _monitor(config)
    before = _feed(first, values[:cut])
    assert before[-1]["id"] == pending["id"] and before[-1]["revision"] == 1
    text, blob = encode_state(first.state_dict())  # as the worker stores a checkpoint
    resumed = _monitor(config)
    resumed.load_state(decode_state(text, blob))
    assert before + _feed(resumed, values[cut:]) == alarms
