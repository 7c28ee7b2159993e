"""Tabular events through the file source, Kafka and ``POST /events`` on PostgreSQL (issue #27).

A palmerpenguins stream whose features are objects with strings (``species``, ``island``,
``sex``), a boolean (``heavy``), numbers and missing values (``null`` or an absent key), every
event with a ``meta`` object and its label arriving :data:`LABEL_DELAY` predictions later. From
event :data:`NEW_KEY_AT` the events carry a key the calibration never had (``model_version``);
from event :data:`JUMP_AT` ``flipper_length_mm`` is missing in about half of them. Two bad
events are mixed in: a string in the declared-numeric ``bill_length_mm`` and a top-level
``model_version`` (metadata belongs under ``meta``).

Through each path the good events are monitored, never dead letters: the checkpoint counts every
prediction, the two bad events are the only dead letters (their reasons name the feature and the
value, or point to ``meta``), one ``schema_change`` alarm names ``model_version`` and a
``data_quality`` alarm names ``flipper_length_mm``'s missing rate. The file run, a file run
stopped half-way and restarted from its checkpoint (the label join's NaN codes, the data-quality
monitor's state), the Kafka run and the HTTP run store the same alarms.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from bench.api_rows import WRITE, make_settings
from connectors.mock_kafka import produce_kafka_python
from monitor.api import create_app
from monitor.db.engine import make_engine
from monitor.db.migrate import upgrade
from monitor.db.store import load_state
from tests.support.databases import postgres_database
from tests.support.processes import MOCK_URL_OPTIONS, OffsetWatch, WorkerProcess, wait_until
from tests.support.streams import Snapshot, canonical, differences, end_offsets, run_file, snapshot
from tests.support.tabular_data import penguins

pytestmark = pytest.mark.postgres

STREAM = "penguins"
FEATURES = ("species", "island", "bill_length_mm", "bill_depth_mm", "flipper_length_mm", "sex",
            "year", "heavy")
CALIBRATION = 300
PREDICTIONS = 480
LABEL_DELAY = 4
NEW_KEY_AT = 200
JUMP_AT = 300
JUMPED = "flipper_length_mm"
T0 = datetime(2026, 12, 1, tzinfo=UTC)
#: Batch sizes: of the file runs and the Kafka worker (records), of ``POST /events`` (items).
BATCH = 40
POST_BATCH = 97

#: The bad events, by the prediction they follow, and what their dead-letter reason says.
BAD_AFTER = {150: "numeric", 350: "top_level"}
REASONS = {
    "numeric": "field 'features.bill_length_mm': \"41.1\" is not a number "
               "(feature 'bill_length_mm' is numeric)",
    "top_level": "field 'model_version': not a field of the event format; put metadata such as "
                 "model_version under 'meta' (an object, ignored by monitoring)",
}
CONFIG: dict[str, Any] = {
    "name": STREAM, "task": "regression", "seed": 7,
    "features": {"bill_length_mm": "numeric", "year": "numeric"},
    "alarm": {"rule": "shiryaev_roberts", "threshold": 1000.0},
    "ood": {"window": 100}, "attribution": {"window": 50}, "trace_every": 5,
    "data_quality": {"false_alarm_every": "1d"},
}


# -- the data ----------------------------------------------------------------------------------


def _table() -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray]:
    """Feature objects (``heavy``: body mass above 4.2 kg), a fixed linear model's predictions
    of the body mass from the flipper length, and the body masses."""
    names, rows = penguins()
    at = {n: names.index(n) for n in names}
    kept = [r for r in rows if r[at["body_mass_g"]] is not None]
    mass = np.array([float(r[at["body_mass_g"]]) for r in kept])
    flipper = np.array([np.nan if r[at[JUMPED]] is None else float(r[at[JUMPED]])
                        for r in kept])
    present = ~np.isnan(flipper)
    slope, intercept = np.polyfit(flipper[present], mass[present], 1)
    predictions = np.where(present, intercept + slope * np.nan_to_num(flipper), mass.mean())
    features = [{**{f: r[at[f]] for f in FEATURES[:-1]}, "heavy": bool(m > 4200.0)}
                for r, m in zip(kept, mass, strict=True)]
    return features, predictions.round(1), mass


def _wire(features: dict[str, Any], position: int) -> dict[str, Any]:
    """A missing value as ``null`` at even positions, as an absent key at odd ones."""
    return {k: v for k, v in features.items() if v is not None or position % 2 == 0}


@dataclass(frozen=True)
class TabularStream:
    """The stream's configuration (YAML, and as the JSON ``POST /streams`` takes) and its
    events (JSONL lines, and as JSON items)."""

    config: Path
    body: dict[str, Any]
    events: list[dict[str, Any]]
    lines: list[bytes]


def build_stream(folder: Path, seed: int = 27) -> TabularStream:
    rng = np.random.default_rng(seed)
    table, predictions, labels = _table()
    calibration = []
    for k, i in enumerate(rng.integers(0, len(table), CALIBRATION)):
        calibration.append({"features": _wire(table[i], k), "prediction": predictions[i],
                            "label": labels[i]})
    events: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for t, i in enumerate(rng.integers(0, len(table), PREDICTIONS)):
        ts = (T0 + timedelta(seconds=t)).isoformat().replace("+00:00", "Z")
        features = dict(table[i])
        if t >= JUMP_AT and rng.uniform() < 0.5:
            features[JUMPED] = None
        features = _wire(features, t)
        if t >= NEW_KEY_AT:
            features["model_version"] = "v2"
        events.append({"kind": "prediction", "stream": STREAM, "id": f"p-{t:04d}", "ts": ts,
                       "features": features, "prediction": float(predictions[i]),
                       "meta": {"request": f"r-{t}", "client": {"region": "eu"}}})
        pending.append({"kind": "label", "stream": STREAM, "id": f"p-{t:04d}", "ts": ts,
                        "label": float(labels[i])})
        if len(pending) > LABEL_DELAY:
            events.append(pending.pop(0))
        if t in BAD_AFTER:
            events.append(_bad(BAD_AFTER[t], table[i], ts))
    events += pending
    body = {**CONFIG, "calibration": calibration}
    cal = folder / "penguins_calibration.jsonl"
    cal.write_text("".join(
        json.dumps({"kind": "prediction", "stream": STREAM, "id": f"cal-{k:04d}", **row}) + "\n"
        for k, row in enumerate(calibration)))
    config = folder / "penguins.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "calibration": cal.name}, sort_keys=False))
    lines = [json.dumps(e, separators=(",", ":")).encode() for e in events]
    return TabularStream(config, body, events, lines)


def _bad(kind: str, features: dict[str, Any], ts: str) -> dict[str, Any]:
    event = {"kind": "prediction", "stream": STREAM, "id": f"bad-{kind}", "ts": ts,
             "features": {k: v for k, v in features.items() if v is not None},
             "prediction": 4000.0}
    if kind == "numeric":
        event["features"]["bill_length_mm"] = "41.1"
    else:
        event["model_version"] = "v2"
    return event


# -- fixtures and checks -----------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """What a run left in PostgreSQL: every result, and the stream's checkpoint (the events it
    counted, its state)."""

    snapshot: Snapshot
    counted: int
    state: dict[str, Any]

    @property
    def alarms(self) -> list[tuple[str, str, str, int]]:
        return [(a["id"], a["detector"], a["kind"], a["event_index"])
                for a in self.snapshot.alarms]


def stored(url: str) -> Stored:
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            checkpoint = load_state(session, STREAM)
    finally:
        engine.dispose()
    assert checkpoint is not None
    return Stored(snapshot(url), checkpoint.event_index, checkpoint.state)


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> TabularStream:
    return build_stream(Path(tmp_path_factory.mktemp("tabular")))


@pytest.fixture
def pg_url(postgres_admin: Engine) -> Iterator[str]:
    with postgres_database(postgres_admin) as url:
        yield url


def write_events(path: Path, lines: Sequence[bytes], mode: str = "wb") -> Path:
    with path.open(mode) as fh:
        fh.write(b"".join(line + b"\n" for line in lines))
    return path


@pytest.fixture(scope="module")
def file_run(stream: TabularStream, postgres_admin: Engine,
             tmp_path_factory: pytest.TempPathFactory) -> Stored:
    """One uninterrupted file run (stopped before the end-of-file flush, as a topic never
    ends)."""
    events = write_events(tmp_path_factory.mktemp("file") / "events.jsonl", stream.lines)
    with postgres_database(postgres_admin) as url:
        run_file(events, url, [stream.config], upto=len(stream.lines), batch_size=BATCH)
        return stored(url)


def check_monitored(run: Stored) -> None:
    """Every good event monitored; the bad ones dead letters naming why; the schema change and
    the missing-rate jump alarmed on."""
    snap = run.snapshot
    assert run.counted == PREDICTIONS
    assert sorted(reason for _, reason, _ in snap.dead_letters) == sorted(REASONS.values())
    assert snap.dead_letter_rows == len(BAD_AFTER)
    schema = [a for a in snap.alarms if a["kind"] == "schema_change"]
    assert len(schema) == 1, run.alarms
    assert schema[0]["evidence"]["key"] == "model_version"
    assert schema[0]["event_index"] == NEW_KEY_AT
    quality = [a for a in snap.alarms if a["kind"] == "data_quality"]
    assert quality, run.alarms
    top = quality[0]["evidence"]["indicators"][0]
    assert (top["feature"], top["rate"]) == (JUMPED, "missing")
    assert quality[0]["event_index"] >= JUMP_AT


def assert_same_state(got: Stored, want: Stored) -> None:
    """The same alarms (every field), trace points, OOD windows and flags, and the same
    checkpoint, bit for bit."""
    assert got.alarms == want.alarms
    assert got.snapshot.trace_points == want.snapshot.trace_points
    assert got.snapshot.ood_windows == want.snapshot.ood_windows
    assert got.snapshot.ood_flags == want.snapshot.ood_flags
    for alarm, wanted in zip(got.snapshot.alarms, want.snapshot.alarms, strict=True):
        assert alarm == wanted, differences(canonical(alarm), canonical(wanted))
    state, wanted = got.snapshot.checkpoints[STREAM], want.snapshot.checkpoints[STREAM]
    assert state == wanted, differences(state, wanted)


# -- the tests ---------------------------------------------------------------------------------


def test_the_file_run_monitors_every_good_event(file_run: Stored) -> None:
    check_monitored(file_run)
    # the calibration's strings and booleans made categorical features (an unseen rate each)
    indicators = file_run.state["quality"]["monitor"]["params"]["indicators"]
    assert {f for f, rate in indicators if rate == "unseen"} == {"species", "island", "sex",
                                                                 "heavy"}


def test_a_restart_from_the_checkpoint_changes_nothing(
    stream: TabularStream, file_run: Stored, pg_url: str, tmp_path: Path
) -> None:
    """Stopped after the jump, before its alarm, with predictions whose missing values are NaN
    codes waiting in the label join; restarted from the registry (calibration and schema read
    back from PostgreSQL) and the checkpoint."""
    half = stream.lines.index(next(line for line in stream.lines
                                   if b'"id":"p-0310"' in line and b'"prediction"' in line))
    events = write_events(tmp_path / "events.jsonl", stream.lines[:half])
    run_file(events, pg_url, [stream.config], upto=half, batch_size=BATCH)
    first = stored(pg_url)
    assert first.counted == 310 and len(first.alarms) < len(file_run.alarms)
    waiting = [row[3] for row in first.state["join"]["predictions"]]  # their code rows
    assert len(waiting) == LABEL_DELAY and any(np.isnan(code) for row in waiting for code in row)
    quality = first.state["quality"]
    assert quality["monitor"]["n_seen"] == 310 and quality["new_keys"] == {"model_version": 200}
    write_events(events, stream.lines[half:], mode="ab")
    run_file(events, pg_url, (), upto=len(stream.lines), batch_size=BATCH)
    resumed = stored(pg_url)
    check_monitored(resumed)
    assert_same_state(resumed, file_run)


@pytest.mark.kafka
def test_the_kafka_run_stores_the_file_runs_results(
    stream: TabularStream, file_run: Stored, kafka_broker: str, pg_url: str, tmp_path: Path
) -> None:
    topic = "tabular"
    end = end_offsets(produce_kafka_python(kafka_broker, topic, stream.lines,
                                           [STREAM] * len(stream.lines)))
    source = f"kafka://{kafka_broker}/{topic}?{MOCK_URL_OPTIONS}"
    worker = WorkerProcess.cli(tmp_path, "kafka", pg_url, source, "g-tabular",
                               ["--config", str(stream.config)], batch_size=BATCH)
    offsets = OffsetWatch(pg_url, f"kafka:{topic}")
    try:
        wait_until(lambda: offsets() == end, "stored offsets at the end", [worker])
        assert worker.terminate() == 0, worker.tail()
    finally:
        worker.ensure_dead()
        offsets.close()
    assert "Traceback" not in worker.logs(), worker.tail()
    run = stored(pg_url)
    check_monitored(run)
    assert_same_state(run, file_run)


def test_post_events_stores_the_same_alarms(
    stream: TabularStream, file_run: Stored, pg_url: str
) -> None:
    """``POST /events`` in batches of :data:`POST_BATCH` items (not the file run's), on a
    stream registered through ``POST /streams`` with the calibration inline: the same results,
    whatever the batches."""
    upgrade(pg_url)
    with TestClient(create_app(make_settings(pg_url))) as client:
        response = client.post("/streams", json=stream.body, headers=WRITE)
        assert response.status_code == 201, response.text
        reasons = []
        for start in range(0, len(stream.events), POST_BATCH):
            response = client.post("/events", json=stream.events[start:start + POST_BATCH],
                                   headers=WRITE)
            assert response.status_code == 202, response.text
            reasons += [d["reason"] for d in response.json()["dead_letters"]]
    assert sorted(reasons) == sorted(REASONS.values())
    run = stored(pg_url)
    check_monitored(run)
    assert_same_state(run, file_run)
