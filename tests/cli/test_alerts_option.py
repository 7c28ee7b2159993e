"""``monitor run --alerts FILE`` (or ``MONITOR_ALERTS_FILE``): a bad routing file is one line and
exit code 2; a good one routes the run's alarms to its receivers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.models import AlertOutboxRow
from monitor.ops.datasets import build_example
from tests.support.receivers import running_receiver


def test_a_bad_routing_file_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "alerts.yaml"
    bad.write_text(
        "receivers: [{name: a, type: email, url: 'http://h/'}]\nroutes: [{receivers: [a]}]\n"
    )
    db = f"sqlite:///{tmp_path}/m.db"
    assert main(["run", "--source", "file:none.jsonl", "--alerts", str(bad), "--db", db]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"monitor: error: {bad}: receivers.0.type: Input should be 'webhook'")
    assert "\n" not in err and "Traceback" not in err
    monkeypatch.setenv("MONITOR_ALERTS_FILE", str(tmp_path / "missing.yaml"))
    assert main(["serve", "--db", db]) == 2
    assert "cannot read alert routing file" in capsys.readouterr().err


def test_run_routes_alarms_to_slack_and_alertmanager(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = build_example(tmp_path, seed=1, phases=[("stable", 200), ("concept", 300)],
                          n_calibration=300, alarm={"rule": "shiryaev_roberts", "threshold": 200})
    db = f"sqlite:///{tmp_path}/m.db"
    with running_receiver() as receiver:
        routes = tmp_path / "alerts.json"
        routes.write_text(json.dumps({
            "receivers": [
                {"name": "team", "type": "slack", "url": receiver.url("/slack")},
                {"name": "am", "type": "alertmanager", "url": receiver.url("/api/v2/alerts")},
            ],
            "routes": [{"receivers": ["team"], "kinds": ["concept_shift"]},
                       {"receivers": ["am"], "min_severity": "warning"}],
        }))
        argv = ["run", "--source", f"file:{paths['events']}", "--config", str(paths["config"]),
                "--alerts", str(routes), "--db", db, "--json"]
        assert main(argv) == 0
    alarms = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["alarms"]
    concept = sorted(a["id"] for a in alarms if a["kind"] == "concept_shift")
    warned = sorted(a["id"] for a in alarms if a["kind"] != "benign_covariate_shift")
    assert concept, "the example must raise a concept-shift alarm"
    assert len(receiver.on("/slack")) == len(concept)
    sent = {json.loads(r.body)[0]["labels"]["alarm_id"] for r in receiver.on("/api/v2/alerts")}
    # every version of at least warning severity (an alarm raised as insufficient_evidence, a
    # warning, is sent again when revised to a kind of at least warning)
    assert set(warned) <= sent <= {a["id"] for a in alarms}
    engine = make_engine(db)
    with session_factory(engine)() as session:
        statuses = set(session.scalars(select(AlertOutboxRow.status)))
    engine.dispose()
    assert statuses == {"delivered"}
