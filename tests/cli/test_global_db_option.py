"""The global ``--db`` option means the same before and after the subcommand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.cli.main import _parser, main
from monitor.db.migrate import upgrade


@pytest.mark.parametrize(
    "argv",
    [
        ["--db", "sqlite:///a.db", "run", "--source", "file:e.jsonl"],
        ["run", "--source", "file:e.jsonl", "--db", "sqlite:///a.db"],
        ["alarms", "list", "--db", "sqlite:///a.db"],
        ["alarms", "--db", "sqlite:///a.db", "list"],
        ["--db", "sqlite:///a.db", "alarms", "list", "--kind", "concept_shift"],
        ["db", "upgrade", "--db", "sqlite:///a.db"],
        ["streams", "list", "--db=sqlite:///a.db"],
    ],
)
def test_db_anywhere(argv: list[str]) -> None:
    assert _parser().parse_args(argv).db == "sqlite:///a.db"


def test_db_absent_is_none() -> None:
    assert _parser().parse_args(["alarms", "list"]).db is None


def test_db_after_subcommand_wins_over_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/monitor.db"
    upgrade(url)
    monkeypatch.setenv("MONITOR_DATABASE_URL", f"sqlite:///{tmp_path}/missing/other.db")
    assert main(["alarms", "list", "--json", "--db", url]) == 0
    assert json.loads(capsys.readouterr().out) == []
