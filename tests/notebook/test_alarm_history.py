"""``m.alarms`` holds each alarm once (its latest revision), ``m.alarm_history`` every version;
``m.alarm(id)`` takes an id or a prefix of one, as the CLI and the API do."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import monitor
from monitor.notebook import NotebookMonitor
from monitor.streams.alarm_ids import AmbiguousAlarmIdError
from tests.support.alarm_ids import SHARED
from tests.support.probe import assert_in_fresh_interpreter


@pytest.fixture(scope="module")
def revised() -> tuple[NotebookMonitor, list[monitor.notebook.Alarm]]:
    """A regression model off by 3 after the calibration: one conditional alarm, raised as
    insufficient_evidence and revised to concept_shift within the batch; and what the batch
    returned."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    m = monitor.watch((X, X.sum(axis=1), X.sum(axis=1) + rng.normal(scale=0.1, size=300)),
                      alarm={"rule": "ville", "alpha": 0.01})
    X_new = rng.normal(size=(400, 2))
    returned = m.update(X_new, X_new.sum(axis=1), X_new.sum(axis=1) + 3.0)
    return m, returned


def test_each_alarm_once_at_its_latest_revision(
    revised: tuple[NotebookMonitor, list[monitor.notebook.Alarm]],
) -> None:
    m, returned = revised
    assert [(a.kind, a.revision) for a in m.alarm_history] == [
        ("insufficient_evidence", 1), ("concept_shift", 2)]
    assert len({a.id for a in m.alarm_history}) == 1
    assert m.alarms == [m.alarm_history[-1]] == returned


def test_an_alarm_by_its_id_or_a_prefix(
    revised: tuple[NotebookMonitor, list[monitor.notebook.Alarm]],
) -> None:
    m, _ = revised
    [alarm] = m.alarms
    assert m.alarm(alarm.id) == m.alarm(alarm.id[:8]) == m.alarm(alarm.id[:4].upper()) == alarm
    for text in (alarm.id[:3], "zzzz", alarm.id[1:9]):
        with pytest.raises(LookupError, match="no alarm with id"):
            m.alarm(text)


def test_an_ambiguous_prefix_lists_the_alarms(
    revised: tuple[NotebookMonitor, list[monitor.notebook.Alarm]],
) -> None:
    m, _ = revised
    copy = NotebookMonitor(m.stream, m.columns)
    copy.alarm_history = [replace(m.alarm_history[-1], id=i) for i in SHARED]
    with pytest.raises(AmbiguousAlarmIdError) as caught:
        copy.alarm("292b3dcb")
    assert caught.value.candidates == list(SHARED[:2])
    assert copy.alarm("292bf").id == SHARED[2]


def test_save_keeps_the_history(
    revised: tuple[NotebookMonitor, list[monitor.notebook.Alarm]], tmp_path: Path,
) -> None:
    m, _ = revised
    m.save(tmp_path / "m.json")
    loaded = NotebookMonitor.load(tmp_path / "m.json")
    assert loaded.alarm_history == m.alarm_history and loaded.alarms == m.alarms


def test_the_notebook_lookup_needs_no_database_library() -> None:
    probe = (
        "import sys, monitor.notebook, monitor.streams.alarm_ids\n"
        "assert 'sqlalchemy' not in sys.modules, 'sqlalchemy imported'\n"
    )
    assert_in_fresh_interpreter(probe)
