"""docs/quickstart.md's walkthrough runs as written: its ``train.py`` block, then each command of
its shell block up to ``monitor alarms list`` (the report and its page are checked by the
end-to-end walkthrough test), with the outputs the text describes."""

from __future__ import annotations

import json
import re
import runpy
import shlex
from pathlib import Path

import pytest

from monitor.cli.main import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def walkthrough_blocks() -> tuple[str, list[str]]:
    """The walkthrough's Python script (the block starting ``# train.py``) and the lines of
    its shell block."""
    section = DOC.read_text(encoding="utf-8").split("## Walkthrough", 1)[1]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, flags=re.S)
    (script,) = [body for lang, body in blocks if lang == "python"
                 and body.startswith("# train.py")]
    (shell,) = [body for lang, body in blocks if lang == "sh"]
    return script, [line for line in shell.splitlines() if line.strip()]


def test_the_quickstart_walkthrough_runs_to_the_alarm_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script, commands = walkthrough_blocks()
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert commands[0] == "python train.py"
    runpy.run_path("train.py", run_name="__main__")
    printed = capsys.readouterr().out.splitlines()
    assert printed == ["classification 600 ('brickface', 'cement', 'foliage', 'grass', 'path', "
                       "'sky', 'window')", "monitor-stream/events.jsonl"]

    run, listing = commands[1], commands[2]
    assert shlex.split(run)[:4] == ["monitor", "--db", "sqlite:///monitor.db", "run"]
    assert main([*shlex.split(run)[1:], "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["dead_letters"] == 0
    kinds = [(a["detector"], a["kind"]) for a in summary["alarms"]]
    assert ("conditional", "concept_shift") in kinds
    assert all(300 <= a["event_index"] < 360 for a in summary["alarms"])

    assert shlex.split(listing)[3:5] == ["alarms", "list"]
    assert main(shlex.split(listing)[1:]) == 0
    table = capsys.readouterr().out
    assert "segments" in table and "concept_shift" in table
    assert commands[3].split()[3:5] == ["report", "--alarm"]  # run by the end-to-end test
