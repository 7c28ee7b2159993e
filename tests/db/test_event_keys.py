"""Event ids of any length, integer ids and epoch times through the worker and the store
(issue #31, item 5), on SQLite and PostgreSQL.

Where an event id is a key (``ood_flags``, ``ingested_events``) the row holds a bounded key made
as a source name's (:func:`~monitor.db.models.bounded_key`) and the whole id beside it when the
key is not the id; where it is only shown (``alarms``, ``calibration_events``) the column holds
the whole id. Before, an id of more than 255 characters was refused at decoding, and an alarm
naming one was refused by the store (``alarm … event_id is 300 characters long``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from monitor.cli.main import main
from monitor.db.engine import make_engine
from monitor.db.models import (
    AlarmRow,
    OODFlagRow,
    OODWindowRow,
    PerformanceWindowRow,
    TracePointRow,
    bounded_key,
    event_key,
    source_key,
)
from monitor.db.queries import list_ood_windows
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.ops.datasets import build_example
from tests.support.records import alarm, window

#: Ids sharing their first 300 characters: their keys differ by the digest only.
PREFIX = "tenant-7/order/" + "x" * 285


def test_event_keys_are_source_keys() -> None:
    assert event_key("e-1") == "e-1" and event_key("a" * 255) == "a" * 255
    key = event_key(PREFIX + "1")
    assert len(key) == 255 and key.startswith(PREFIX[:183]) and "~sha256:" in key
    assert event_key(PREFIX + "2") != key and event_key(PREFIX + "1") == key
    assert source_key(PREFIX) == event_key(PREFIX) == bounded_key(PREFIX, 255)
    assert len(bounded_key("y" * 1000, 100)) == 100


def test_long_ids_are_stored_whole_in_alarms_and_ood_flags(db_session: Session) -> None:
    long_id = "z" * 10_000
    flagged = (PREFIX + "1", PREFIX + "2", "e-short")
    persist_batch(db_session, Batch(alarms=[replace(alarm(3), event_id=long_id)],
                                    ood_windows=[replace(window(0), flagged_ids=flagged)]))
    assert db_session.scalars(select(AlarmRow.event_id)).one() == long_id
    [(_, ids)] = list_ood_windows(db_session, "bikes")
    assert sorted(ids) == sorted(flagged)
    rows = {r.event_id: r.full_event_id for r in db_session.scalars(select(OODFlagRow))}
    assert rows == {event_key(PREFIX + "1"): PREFIX + "1", event_key(PREFIX + "2"): PREFIX + "2",
                    "e-short": None}
    # a replayed batch stores nothing twice
    db_session.rollback()
    persist_batch(db_session, Batch(ood_windows=[replace(window(0), flagged_ids=flagged)]))
    assert len(list(db_session.scalars(select(OODFlagRow)))) == 3


# -- end to end: `monitor run` over a file --------------------------------------------------


def _example(folder: Path) -> dict[str, Path]:
    """A stream with delayed labels, alarms and OOD flags."""
    return build_example(folder, seed=4, n_calibration=200, label_delay=5,
                         phases=[("stable", 200), ("extreme_covariate", 350)],
                         alarm={"rule": "shiryaev_roberts", "threshold": 100})


def _rewritten(events: Path, out: Path) -> dict[str, str]:
    """The events with realistic ids and times: prediction ``i`` gets, by ``i % 3``, an integer
    id (its label the id as a string), its own id or a 300+-character id (sharing its prefix
    with the others); times are epoch milliseconds, epoch seconds or ISO 8601 in turn.
    Returns the stored id of each original id."""
    ids: dict[str, str] = {}
    lines = []
    for line in events.read_bytes().splitlines():
        event = json.loads(line)
        number = int(event["id"].removeprefix("e-"))
        wire: Any = [number, event["id"], PREFIX + event["id"]][number % 3]
        ids[event["id"]] = str(wire)
        if event["kind"] == "label" and isinstance(wire, int):
            wire = str(wire)
        seconds = datetime.fromisoformat(event["ts"]).timestamp()
        event["ts"] = [round(seconds * 1000), seconds, event["ts"]][(number // 3) % 3]
        lines.append(json.dumps({**event, "id": wire}) + "\n")
    out.write_text("".join(lines))
    return ids


def _run(url: str, events: Path, config: Path) -> dict[str, Any]:
    argv = ["--db", url, "run", "--source", f"file:{events}", "--config", str(config),
            "--batch-size", "64", "--json"]
    assert main(argv) == 0
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            flags: dict[int, list[str]] = {}
            for w, ids in list_ood_windows(session, "shuttle"):
                flags[w.window_index] = sorted(ids)
            return {
                "alarms": [(a.detector, a.event_index, a.kind, a.statistic, a.event_id)
                           for a in session.scalars(select(AlarmRow).order_by(
                               AlarmRow.detector, AlarmRow.event_index))],
                "traces": len(list(session.scalars(select(TracePointRow)))),
                "windows": [(w.start_index, w.end_index, w.n_flagged) for w in session.scalars(
                    select(OODWindowRow).order_by(OODWindowRow.window_index))],
                "flags": flags,
                "performance": [(w.n, w.metrics) for w in session.scalars(
                    select(PerformanceWindowRow).order_by(PerformanceWindowRow.window_index))],
            }
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], dict[str, str]]:
    paths = _example(tmp_path_factory.mktemp("event_keys"))
    rewritten = paths["events"].with_name("realistic_events.jsonl")
    return {**paths, "rewritten": rewritten}, _rewritten(paths["events"], rewritten)


def test_long_and_integer_ids_and_epoch_times_give_the_results_of_plain_ones(
    empty_database_url: str, tmp_path: Path,
    example: tuple[dict[str, Path], dict[str, str]], capsys: pytest.CaptureFixture[str],
) -> None:
    paths, ids = example
    plain_url = f"sqlite:///{tmp_path / 'plain.db'}"
    want = _run(plain_url, paths["events"], paths["config"])
    got = _run(empty_database_url, paths["rewritten"], paths["config"])
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["dead_letters"] == 0
    assert want["alarms"] and any(want["flags"].values()) and want["performance"]
    assert any(len(ids[a[4]]) > 255 for a in want["alarms"])  # an alarm names a long id
    assert any(len(ids[i]) > 255 for f in want["flags"].values() for i in f)
    assert got["alarms"] == [(*a[:4], ids[a[4]]) for a in want["alarms"]]
    assert got["flags"] == {w: sorted(ids[i] for i in f) for w, f in want["flags"].items()}
    assert (got["traces"], got["windows"], got["performance"]) == (
        want["traces"], want["windows"], want["performance"])
