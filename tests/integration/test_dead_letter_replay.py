"""Dead letters can be listed and replayed (issue #14): the events of a stream registered after
they were read become dead letters (``unknown stream``); once the stream is registered,
``monitor dead-letters replay`` processes them through the same validation and detectors, as if
the stream had been registered from the start (they were its only events), removes them from the
dead-letter table in the same transaction, and does nothing the second time. A record that fails
again stays with its new reason; ``--dry-run`` changes nothing; offsets never move.

On SQLite and PostgreSQL, through the command line (``monitor run`` over a file source).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from connectors import FileSource
from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.models import AlarmRow, DeadLetterRow
from monitor.db.replay_store import CheckpointMovedError, persist_replay
from monitor.db.sink import DatabaseSink
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.engine.pipeline import Pipeline
from monitor.engine.worker import StopFlag, Worker
from monitor.ops.datasets import build_example
from monitor.streams.records import DeadLetter
from monitor.streams.setup import build_monitors, read_configs
from monitor.streams.state import Checkpoint
from tests.support.streams import Snapshot, snapshot

ALARM = {"rule": "shiryaev_roberts", "threshold": 100}
MALFORMED = (b'{"kind":"prediction","stream":"late","id":"bad-1","ts":"2026-01-01T00:00:00Z",'
             b'"features":[1,2],"prediction":1.0}')
NOT_JSON = b"not json at all"


@pytest.fixture
def db(empty_database_url: str) -> str:
    """A new empty database, on SQLite and on PostgreSQL (tests/conftest.py)."""
    return empty_database_url


@dataclass(frozen=True)
class Files:
    early: Path  # configuration of the stream registered from the start
    late: Path  # configuration of the stream registered after its events were read
    events: Path  # both streams' events, a malformed "late" record and a line that is no JSON
    late_events: Path  # the "late" stream's valid events alone, in the same order
    n_late: int


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    folder = tmp_path_factory.mktemp("replay")
    late = build_example(folder, seed=11, phases=[("stable", 120), ("concept", 180)],
                         n_calibration=200, label_delay=10, stream="late", alarm=ALARM)
    early = build_example(folder, seed=12, phases=[("stable", 150)], n_calibration=200,
                          stream="early", alarm=ALARM)
    late_lines = late["events"].read_bytes().splitlines()
    early_lines = early["events"].read_bytes().splitlines()
    merged: list[bytes] = []
    for i in range(max(len(late_lines), len(early_lines))):
        merged += [lines[i] for lines in (early_lines, late_lines) if i < len(lines)]
        if i == 40:
            merged += [MALFORMED, NOT_JSON]
    events = folder / "events.jsonl"
    events.write_bytes(b"".join(line + b"\n" for line in merged))
    late_events = folder / "late_only.jsonl"
    late_events.write_bytes(b"".join(line + b"\n" for line in late_lines))
    return Files(early["config"], late["config"], events, late_events, len(late_lines))


def cli(capsys: pytest.CaptureFixture[str], db: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--db", db, *args])
    out, err = capsys.readouterr()
    return code, out, err


def replay(capsys: pytest.CaptureFixture[str], db: str, *args: str) -> dict[str, Any]:
    code, out, err = cli(capsys, db, "dead-letters", "replay", "--json", *args)
    assert code == 0, err
    return dict(json.loads(out))


def reference(files: Files, url: str) -> Snapshot:
    """The "late" stream registered from the start, its events alone, stopped before the
    end-of-file flush (replay does not close a partial OOD window either)."""
    sink = DatabaseSink(url)
    source = FileSource(files.late_events)
    pipeline = Pipeline(build_monitors(read_configs([str(files.late)])), source.name)
    stop = StopFlag()
    worker = Worker(source, pipeline, sink, "file", batch_size=500,
                    on_batch=lambda _: stop.set() if source.position >= files.n_late else None)
    try:
        worker.run(stop)
    finally:
        source.close()
        sink.close()
    return snapshot(url)


def of(snap: Snapshot, stream: str) -> tuple[Any, ...]:
    """A stream's stored results."""
    alarms = [a for a in snap.alarms if a["stream"] == stream]
    traces = [t for t in snap.trace_points if stream in t]
    windows = [w for w in snap.ood_windows if stream in w]
    return alarms, traces, windows, snap.checkpoints.get(stream)


def letters(url: str) -> list[DeadLetterRow]:
    engine = make_engine(url)
    try:
        with session_factory(engine)() as session:
            rows = list(session.scalars(select(DeadLetterRow).order_by(DeadLetterRow.id)))
            session.expunge_all()
            return rows
    finally:
        engine.dispose()


def test_replay_processes_the_dead_letters_of_a_stream_registered_late(
    db: str, files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, db, "streams", "create", str(files.early))[0] == 0
    code, _, err = cli(capsys, db, "run", "--source", f"file:{files.events}", "--json")
    assert code == 0, err
    before = letters(db)
    assert len(before) == files.n_late + 2
    assert sum(r.reason == "unknown stream 'late'" for r in before) == files.n_late + 1

    # Listing: by the stream the record names (stored without one: the stream was unknown).
    code, out, _ = cli(capsys, db, "dead-letters", "list", "--stream", "late", "--json",
                       "--limit", "10000")
    listed = json.loads(out)  # one array, as every list command's --json
    assert code == 0 and len(listed) == files.n_late + 1
    assert {d["payload_stream"] for d in listed} == {"late"}
    code, out, _ = cli(capsys, db, "dead-letters", "list", "--reason-contains", "JSON", "--json")
    assert code == 0 and [d["payload"] for d in json.loads(out)] == [NOT_JSON.decode()]
    code, out, _ = cli(capsys, db, "dead-letters", "list", "--limit", "3")
    assert code == 0 and "reason" in out and "(late)" in out
    code, out, _ = cli(capsys, db, "dead-letters", "list", "--since", "2999-01-01", "--json")
    assert code == 0 and json.loads(out) == []

    # The stream is still unknown: replaying it is refused in one line, nothing changes.
    start = snapshot(db)
    code, _, err = cli(capsys, db, "dead-letters", "replay", "--stream", "late")
    assert code == 1 and err.count("\n") == 1 and "not registered" in err
    assert snapshot(db) == start

    assert cli(capsys, db, "streams", "create", str(files.late))[0] == 0
    registered = snapshot(db)

    # Dry run: reports what would be replayed and why the rest would still fail; no change.
    dry = replay(capsys, db, "--stream", "late", "--dry-run")
    assert (dry["matched"], dry["replayed"], dry["failed"]) == (files.n_late + 1, files.n_late, 1)
    [failure] = dry["failures"]
    assert failure["previous_reason"] == "unknown stream 'late'"
    assert "feature" in failure["reason"] and failure["stream"] == "late"
    assert snapshot(db) == registered
    assert [(r.id, r.reason) for r in letters(db)] == [(r.id, r.reason) for r in before]

    done = replay(capsys, db, "--stream", "late")
    assert (done["replayed"], done["failed"], done["by_stream"]) == (
        files.n_late, 1, {"late": files.n_late}
    )
    after = snapshot(db)
    assert after.offsets == registered.offsets  # the live source's offsets never move
    assert of(after, "early") == of(registered, "early")

    # The results are those of a run that had the stream registered from the start.
    want = reference(files, f"sqlite:///{tmp_path}/reference.db")
    alarms, traces, windows, state = of(after, "late")
    assert state is not None and state == want.checkpoints["late"]
    assert alarms == [a for a in want.alarms if a["stream"] == "late"] and alarms
    assert traces == [t for t in want.trace_points if "late" in t] and traces
    assert windows == [w for w in want.ood_windows if "late" in w]

    # The replayed dead letters are gone; the malformed one stays with its new reason, the
    # line that is no JSON (no stream) was not selected.
    rest = {bytes(r.payload): r for r in letters(db)}
    assert sorted(rest) == sorted([MALFORMED, NOT_JSON])
    assert rest[MALFORMED].stream == "late" and "feature" in rest[MALFORMED].reason
    assert rest[MALFORMED].reason == failure["reason"]

    # Idempotent: a second replay processes nothing and changes nothing.
    again = replay(capsys, db, "--stream", "late")
    assert (again["replayed"], again["failed"], again["batches"]) == (0, 1, 1)
    assert snapshot(db) == after
    # Replaying everything: the malformed record and the line that is no JSON fail again.
    everything = replay(capsys, db)
    assert (everything["matched"], everything["replayed"], everything["failed"]) == (2, 0, 2)
    assert snapshot(db) == after

    # The human-readable report.
    code, out, _ = cli(capsys, db, "dead-letters", "replay", "--dry-run")
    assert code == 0 and "0 of 2 dead letters would be replayed, 2 would still fail" in out


def test_replay_is_refused_while_nothing_is_registered(
    db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, db, "dead-letters", "replay")
    assert code == 1 and err.count("\n") == 1 and "no stream is registered" in err
    code, out, _ = cli(capsys, db, "dead-letters", "list", "--json")
    assert code == 0 and json.loads(out) == []


def test_a_moved_checkpoint_refuses_the_replay_batch(db: str, files: Files) -> None:
    """Another writer stored the stream's checkpoint after the replay loaded it: the batch is
    refused and nothing of it is written."""
    sink = DatabaseSink(db)
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    letter = DeadLetter("file:x", 0, 7, "unknown stream 'late'", b"{}", ts)
    try:
        with sink.sessions() as session:
            persist_batch(session, Batch(dead_letters=[letter],
                                         checkpoints={"late": Checkpoint("late", 1, 5, {"n": 1})}))
            [row_id] = session.scalars(select(DeadLetterRow.id)).all()
            session.rollback()
            moved = Batch(checkpoints={"late": Checkpoint("late", 1, 9, {"n": 2})})
            with pytest.raises(CheckpointMovedError, match="stop the worker"):
                persist_replay(session, moved, expected={"late": None}, replayed=[row_id])
            assert session.scalars(select(DeadLetterRow.id)).all() == [row_id]
            session.rollback()
            assert persist_replay(session, moved, expected={"late": (1, 5)},
                                  replayed=[row_id]) == {row_id}
            assert session.scalars(select(DeadLetterRow.id)).all() == []
    finally:
        sink.close()


def test_replayed_events_follow_what_the_stream_processed_live(
    db: str, files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stream processed the first half of its events live; the second half are dead letters
    (stored by hand here, as if their stream had been unknown). Replay gives them the event
    indexes after the live ones: the results are those of one uninterrupted run."""
    lines = files.late_events.read_bytes().splitlines()
    half = len(lines) // 2
    first = tmp_path / "first.jsonl"
    first.write_bytes(b"".join(line + b"\n" for line in lines[:half]))
    assert cli(capsys, db, "streams", "create", str(files.late))[0] == 0
    run_to_end(first, files.late, db, half)
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    rest = list(enumerate(lines[half:], start=half))
    # Stored in reverse (ids against offset order) and beside another source's dead letter:
    # replay takes source, partition, offset order, and --source keeps only its source.
    stored = [DeadLetter("kafka:late", 0, k, "unknown stream 'late'", line, ts)
              for k, line in reversed(rest)]
    stored.append(DeadLetter("kafka:elsewhere", 0, 0, "unknown stream 'late'", lines[0], ts))
    sink = DatabaseSink(db)
    try:
        with sink.sessions() as session:
            persist_batch(session, Batch(dead_letters=stored))
    finally:
        sink.close()
    done = replay(capsys, db, "--source", "kafka:late")
    assert (done["replayed"], done["failed"]) == (len(rest), 0)
    assert snapshot(db).checkpoints["late"] == interrupted_reference(files, tmp_path, lines)
    assert [bytes(r.payload) for r in letters(db)] == [lines[0]]  # the other source's
    assert replay(capsys, db, "--source", "kafka:late")["matched"] == 0


def run_to_end(path: Path, config: Path, url: str, n: int) -> None:
    """A worker over ``path`` that stops when it is read, before the end-of-file flush."""
    sink = DatabaseSink(url)
    source = FileSource(path)
    pipeline = Pipeline(build_monitors(read_configs([str(config)])), source.name)
    stop = StopFlag()
    worker = Worker(source, pipeline, sink, "file", batch_size=100,
                    on_batch=lambda _: stop.set() if source.position >= n else None)
    try:
        worker.run(stop)
    finally:
        source.close()
        sink.close()


def interrupted_reference(files: Files, folder: Path, lines: list[bytes]) -> Any:
    path = folder / "reference.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    url = f"sqlite:///{folder}/reference2.db"
    run_to_end(path, files.late, url, len(lines))
    return snapshot(url).checkpoints["late"]


def test_alarms_raised_by_a_replay_are_queued_for_the_alert_receivers(
    db: str, files: Files, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from monitor.db.models import AlertOutboxRow

    assert cli(capsys, db, "streams", "create", str(files.early))[0] == 0
    assert cli(capsys, db, "run", "--source", f"file:{files.events}", "--json")[0] == 0
    assert cli(capsys, db, "streams", "create", str(files.late))[0] == 0
    monkeypatch.setenv("MONITOR_WEBHOOK_URLS", "http://127.0.0.1:9/hook")
    assert replay(capsys, db, "--stream", "late")["replayed"] == files.n_late
    engine = make_engine(db)
    try:
        with session_factory(engine)() as session:
            late = {a.id: a.revision for a in session.scalars(
                select(AlarmRow).where(AlarmRow.stream == "late"))}
            queued = [(r.idempotency_key, r.receiver, r.status) for r in
                      session.scalars(select(AlertOutboxRow))]
    finally:
        engine.dispose()
    # The earlier run had no receiver: only the replay's alarms are queued, each version once.
    assert late and sorted(queued) == sorted(
        (f"{a}:{r}", "webhook-1", "pending") for a, n in late.items() for r in range(1, n + 1)
    )


def test_a_replay_runs_the_streams_stored_configuration_version(
    db: str, files: Files, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stream updated to version 2 before its dead letters are replayed: the replay runs
    version 2 (its alarms say so), as the worker and HTTP ingest would."""
    assert cli(capsys, db, "streams", "create", str(files.early))[0] == 0
    assert cli(capsys, db, "run", "--source", f"file:{files.events}", "--json")[0] == 0
    assert cli(capsys, db, "streams", "create", str(files.late))[0] == 0
    data = yaml.safe_load(files.late.read_text())
    data["alarm"] = {"rule": "shiryaev_roberts", "threshold": 150}
    changed = files.late.with_name("late-v2.yaml")
    changed.write_text(yaml.safe_dump(data))
    assert cli(capsys, db, "streams", "update", str(changed))[0] == 0
    done = replay(capsys, db, "--stream", "late")
    assert done["replayed"] == files.n_late
    engine = make_engine(db)
    with session_factory(engine)() as session:
        alarms = session.scalars(select(AlarmRow).where(AlarmRow.stream == "late")).all()
        assert alarms and {a.evidence["config_version"] for a in alarms} == {2}
        assert {a.threshold for a in alarms if a.rule == "shiryaev_roberts"} == {150.0}
    engine.dispose()


def test_a_replay_skips_events_the_stream_already_processed(
    db: str, files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Dead letters of the second half of the stream's events, of the last 40 events it
    processed live, and a second copy of one event: the copies are skipped (the dry run says
    so), the rest replayed; the results are those of one uninterrupted run."""
    lines = files.late_events.read_bytes().splitlines()
    half, overlap = len(lines) // 2, 40
    first = tmp_path / "first.jsonl"
    first.write_bytes(b"".join(line + b"\n" for line in lines[:half]))
    assert cli(capsys, db, "streams", "create", str(files.late))[0] == 0
    run_to_end(first, files.late, db, half)
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    stored = [DeadLetter("kafka:late", 0, k, "unknown stream 'late'", line, ts)
              for k, line in enumerate(lines[half - overlap:], start=half - overlap)]
    stored.append(DeadLetter("kafka:late", 0, len(lines), "unknown stream 'late'", lines[half],
                             ts))  # a second copy of the first event not processed yet
    sink = DatabaseSink(db)
    try:
        with sink.sessions() as session:
            persist_batch(session, Batch(dead_letters=stored))
    finally:
        sink.close()
    live = snapshot(db)

    dry = replay(capsys, db, "--dry-run")
    assert (dry["replayed"], dry["skipped"], dry["failed"]) == (len(lines) - half, overlap + 1, 0)
    assert {s["rule"] for s in dry["skips"]} == {"already_processed"}
    assert sorted(s["offset"] for s in dry["skips"]) == [
        *range(half - overlap, half), len(lines)]
    code, out, _ = cli(capsys, db, "dead-letters", "replay", "--dry-run")
    assert code == 0 and f"{overlap + 1} would be skipped" in out
    assert (f"{overlap + 1} would be skipped (late): the stream has already processed an event "
            "of the same kind and id within its label-join window") in out
    assert snapshot(db) == live

    done = replay(capsys, db)
    assert (done["replayed"], done["skipped"]) == (len(lines) - half, overlap + 1)
    assert snapshot(db).checkpoints["late"] == interrupted_reference(files, tmp_path, lines)
    assert sorted(r.offset for r in letters(db)) == [*range(half - overlap, half), len(lines)]
    again = replay(capsys, db)  # the skipped ones stay, and are skipped again
    assert (again["replayed"], again["skipped"]) == (0, overlap + 1)
