"""``monitor report --alarm`` takes the short id ``monitor alarms list`` shows, or any prefix of
at least 4 hexadecimal digits that names one alarm; an ambiguous one lists the candidates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from tests.support.alarm_ids import SHARED, alarms_with_shared_prefixes


@pytest.fixture
def db(empty_database_url: str) -> str:
    upgrade(empty_database_url)
    engine = make_engine(empty_database_url)
    with session_factory(engine)() as session:
        persist_batch(session, Batch(alarms=alarms_with_shared_prefixes()))
    engine.dispose()
    return empty_database_url


def test_the_short_id_of_the_list_writes_the_report(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--db", db, "alarms", "list", "--stream", "bikes"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert SHARED[2][:8] in listed
    monkeypatch.chdir(tmp_path)
    assert main(["--db", db, "report", "--alarm", SHARED[2][:8]]) == 0
    out = capsys.readouterr().out
    assert out == f"report of alarm {SHARED[2]}: alarm-{SHARED[2]}.html\n"
    assert f"alarm {SHARED[2]}</p>" in (tmp_path / f"alarm-{SHARED[2]}.html").read_text()


def test_an_ambiguous_prefix_is_refused_with_the_candidates(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    assert main(["--db", db, "report", "--alarm", "292b3dcb", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"monitor: error: alarm id '292b3dcb' is the start of 2 alarm ids: {SHARED[0]}, "
        f"{SHARED[1]}; give more of it (see `monitor alarms list`)\n"
    )
    assert not out.exists()
    assert main(["--db", db, "report", "--alarm", "292c", "--out", str(out)]) == 2
    assert capsys.readouterr().err == (
        "monitor: error: no alarm with id '292c' (see `monitor alarms list`)\n"
    )


def test_show_and_ack_take_a_prefix(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--db", db, "alarms", "show", "292bf", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["id"], shown["acknowledged_at"]) == (SHARED[2], None)
    assert [(r["revision"], r["kind"]) for r in shown["revisions"]] == [(1, shown["kind"])]
    assert main(["--db", db, "alarms", "ack", "292BF01E", "--by", "alice", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert (done["id"], done["acknowledged_by"]) == (SHARED[2], "alice")
    assert main(["--db", db, "alarms", "ack", "292bf"]) == 0  # again: the first one is kept
    assert capsys.readouterr().out == (
        f"alarm {SHARED[2]} acknowledged by alice at {done['acknowledged_at']}\n")
    assert main(["--db", db, "alarms", "show", "292bf"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"alarm {SHARED[2]}\n") and "  acknowledged_by: alice\n" in text


@pytest.mark.parametrize("action", ["show", "ack"])
def test_show_and_ack_refuse_an_ambiguous_prefix(
    db: str, capsys: pytest.CaptureFixture[str], action: str
) -> None:
    assert main(["--db", db, "alarms", action, "292b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(i in err for i in SHARED)
    assert main(["--db", db, "alarms", "show", SHARED[0], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["acknowledged_at"] is None  # nothing was changed
