"""docs/quickstart.md's walkthrough runs as written: its ``train.py`` block (a scikit-learn
model on bundled data, then the front door), then each command of its shell block — ``monitor
run``, ``monitor alarms list``, ``monitor report --alarm PREFIX`` with a prefix read from the
list's id column — and the report opened in headless Chromium (a screenshot, no console error,
a performance section with data or its sentence), with the outputs the text describes."""

from __future__ import annotations

import json
import re
import runpy
import shlex
from pathlib import Path

import pytest

from monitor.cli.main import main
from tests.support.browser import find_chromium, open_page

DOC = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
CHROMIUM = find_chromium()


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
    # The id column: each alarm row starts with its id's first 8 characters; a shorter prefix
    # names the alarm as well.
    (row,) = [line for line in table.splitlines() if "concept_shift" in line]
    short = row.split()[0]
    concept = next(a for a in summary["alarms"] if a["kind"] == "concept_shift")
    assert len(short) == 8 and concept["id"].startswith(short)
    report = shlex.split(commands[3].replace("ALARM_ID", short[:6]))
    assert report[3:5] == ["report", "--alarm"]
    assert main(report[1:]) == 0
    capsys.readouterr()
    page = tmp_path / report[report.index("--out") + 1]
    html = page.read_text(encoding="utf-8")
    assert concept["id"] in html
    assert "segments: concept shift (conditional detector)" in html
    if CHROMIUM is None:
        pytest.skip("no Chromium (apt-get install chromium): the page was written, not opened")
    seen = open_page(CHROMIUM, page, tmp_path / "report.png")
    assert seen.errors == []
    assert seen.title.startswith("segments: concept shift (conditional detector), ")
    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert 'id="performance"' in html
    section = html.split('id="performance"', 1)[1].split("</section>", 1)[0]
    # Data (a table of both sides with their sizes) or the sentence that says why not.
    assert ("<table>" in section and "before (n = " in section) or "Too few labels" in section
