"""Every ``--json`` of the command line is one JSON document on stdout: each list command one
array, every other command one object (README "Command line")."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from monitor.cli.main import main
from monitor.ops.datasets import build_example


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A database with a stream, its alarms, two dead letters and a fleet; and the stdout of the
    ``monitor run --json`` that stored them."""
    folder = tmp_path_factory.mktemp("json")
    paths = build_example(folder, seed=1, phases=[("stable", 200), ("concept", 300)],
                          n_calibration=300, alarm={"rule": "shiryaev_roberts", "threshold": 200})
    with paths["events"].open("ab") as events:
        events.write(b"not json\n{\"kind\": \"prediction\", \"stream\": \"elsewhere\"}\n")
    fleet = folder / "fleet.yaml"
    fleet.write_text("name: payments\nmembers: [shuttle/conditional]\n")
    url = f"sqlite:///{folder}/m.db"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--db", url, "streams", "create", str(paths["config"])]) == 0
        start = out.tell()
        assert main(["--db", url, "run", "--source", f"file:{paths['events']}", "--json"]) == 0
        run = out.getvalue()[start:]
        assert main(["--db", url, "fleets", "create", str(fleet)]) == 0
    return {"url": url, "run": run, "events": paths["events"]}


def _stdout(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)  # the whole of it


def test_run_json_is_one_object_with_every_alarm(db: dict[str, Any]) -> None:
    summary = json.loads(db["run"])
    assert isinstance(summary, dict) and summary["dead_letters"] == 2
    assert {a["kind"] for a in summary["alarms"]} >= {"concept_shift"}


def test_run_without_json_prints_one_json_line_per_alarm_version(
    db: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    other = f"sqlite:///{tmp_path}/other.db"
    stored = json.loads(db["run"])["alarms"]
    assert main(["--db", other, "run", "--source", f"file:{db['events']}", "--config",
                 str(db["events"].with_name("shuttle.yaml"))]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    latest = {a["id"]: a for a in printed}  # a revision is printed again
    assert sorted(latest) == sorted(a["id"] for a in stored)


@pytest.mark.parametrize(
    ("argv", "length"),
    [
        (["alarms", "list"], None),
        (["streams", "list"], 1),
        (["fleets", "list"], 1),
        (["dead-letters", "list"], 2),
        (["dead-letters", "list", "--stream", "nobody"], 0),
    ],
    ids=["alarms", "streams", "fleets", "dead-letters", "no-dead-letters"],
)
def test_every_list_is_one_array(
    db: dict[str, Any], capsys: pytest.CaptureFixture[str], argv: list[str], length: int | None
) -> None:
    listed = _stdout(capsys, "--db", db["url"], *argv, "--json")
    assert isinstance(listed, list)
    assert len(listed) == (len(json.loads(db["run"])["alarms"]) if length is None else length)
    assert all(isinstance(item, dict) for item in listed)


def test_the_fleet_listed_is_the_one_registered(
    db: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    [fleet] = _stdout(capsys, "--db", db["url"], "fleets", "list", "--json")
    assert (fleet["name"], fleet["rule"], fleet["members"]) == (
        "payments", "e_d_bh", ["shuttle/conditional"])
    assert fleet["evaluated_through"] is None and fleet["created_at"].endswith("Z")
    assert main(["--db", db["url"], "fleets", "list"]) == 0
    assert capsys.readouterr().out.startswith("payments\te_d_bh\talpha 0.0001\t1 members")


@pytest.mark.parametrize(
    "argv",
    [["dead-letters", "replay", "--dry-run"], ["db", "prune"]],
    ids=["replay", "prune"],
)
def test_every_other_command_is_one_object(
    db: dict[str, Any], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert isinstance(_stdout(capsys, "--db", db["url"], *argv, "--json"), dict)
