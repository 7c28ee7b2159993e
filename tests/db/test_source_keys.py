"""Source names of any length (issue #14): a file source whose path is longer than 255
characters used to crash-loop the worker (``offset source is 272 characters long``).

Offsets and dead letters are stored under a bounded key (the name itself up to 255 characters,
else a readable prefix and a SHA-256 of the whole name) beside the readable name; rows stored
before the key existed (the name is the key, no readable-name column) keep working.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from monitor.cli.main import main
from monitor.db.engine import make_engine
from monitor.db.models import DeadLetterRow, SourceOffsetRow, source_key
from monitor.db.queries import list_dead_letters
from monitor.db.store import load_offsets, persist_batch
from monitor.engine.batch import Batch
from monitor.ops.datasets import build_example
from monitor.streams.records import DeadLetter, SourceOffset

TS = datetime(2026, 12, 1, 12, tzinfo=UTC)
LONG = "file:/data/" + "x" * 300 + "/events.jsonl"


def test_keys_are_bounded_distinct_and_readable() -> None:
    assert source_key("file:/tmp/e.jsonl") == "file:/tmp/e.jsonl"
    assert source_key("a" * 255) == "a" * 255
    key = source_key(LONG)
    assert len(key) <= 255 and key.startswith("file:/data/xxx")
    assert source_key(LONG + "2") != key and source_key(LONG) == key
    assert len(source_key("y" * 100_000)) <= 255


def test_long_source_names_are_stored_and_read_back(db_session: Session) -> None:
    letter = DeadLetter(LONG, 0, 3, "not JSON", b"nope", TS)
    persist_batch(db_session, Batch(offsets=[SourceOffset(LONG, 0, 4)], dead_letters=[letter]))
    persist_batch(db_session, Batch(offsets=[SourceOffset(LONG, 0, 9)], dead_letters=[letter]))
    assert load_offsets(db_session, LONG) == {0: 9}
    assert load_offsets(db_session, LONG[:-1]) == {}
    [row] = list_dead_letters(db_session, source=LONG)
    assert (row.source_name, row.offset) == (LONG, 3)
    offset_row = db_session.scalars(select(SourceOffsetRow)).one()
    assert offset_row.source_name == LONG and len(offset_row.source) <= 255


def test_rows_stored_before_the_key_keep_working(db_session: Session) -> None:
    """Rows of the previous schema: the name in ``source``, no readable name."""
    with db_session.begin():
        db_session.execute(insert(SourceOffsetRow).values(
            source="file:/old.jsonl", partition=0, offset=5, updated_at=TS))
        db_session.execute(insert(DeadLetterRow).values(
            source="file:/old.jsonl", partition=0, offset=2, reason="r", payload=b"p",
            stream=None, ts=TS, created_at=TS))
    assert load_offsets(db_session, "file:/old.jsonl") == {0: 5}
    persist_batch(db_session, Batch(offsets=[SourceOffset("file:/old.jsonl", 0, 8)]))
    assert load_offsets(db_session, "file:/old.jsonl") == {0: 8}
    assert len(list_dead_letters(db_session, source="file:/old.jsonl")) == 1


@pytest.fixture
def long_path_example(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path
    for part in ("a" * 100, "b" * 100, "c" * 60):
        folder = folder / part
    paths = build_example(folder, seed=2, n_calibration=100, phases=[("stable", 60)])
    with paths["events"].open("ab") as f:
        f.write(b"not json\n")
    assert len(f"file:{paths['events'].resolve()}") > 255
    return paths


def test_a_file_path_longer_than_255_characters_runs_end_to_end(
    empty_database_url: str, long_path_example: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    events = long_path_example["events"].resolve()
    argv = ["--db", empty_database_url, "run", "--source", f"file:{events}", "--config",
            str(long_path_example["config"]), "--batch-size", "25", "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert first["events"] > 0 and first["dead_letters"] == 1
    assert main(argv) == 0  # a restart resumes after the stored offset: nothing is redone
    second = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (second["events"], second["dead_letters"]) == (0, 0)
    lines = len(events.read_bytes().splitlines())
    engine = make_engine(empty_database_url)
    try:
        with Session(engine) as session:
            assert load_offsets(session, f"file:{events}") == {0: lines}
            [letter] = list_dead_letters(session)
            assert letter.source_name == f"file:{events}"
    finally:
        engine.dispose()
