"""Re-registration is explicit (issue #14): registering an existing name never changes its stored
configuration; an identical configuration is accepted silently; a changed one is refused with one
line pointing to ``monitor streams update`` / ``PUT /streams/{name}``, which store a new version.

CLI (``monitor streams create``, ``monitor run --config``, ``monitor streams update``) on SQLite
and PostgreSQL; the API over the module's PostgreSQL database.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import READ, WRITE, stream_config
from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.models import StreamRow
from monitor.ops.datasets import build_example
from monitor.streams.config import StreamConfig

# --- CLI ------------------------------------------------------------------------------------------


@pytest.fixture
def db(empty_database_url: str) -> str:
    """A new empty database, on SQLite and on PostgreSQL (tests/conftest.py)."""
    return empty_database_url


@pytest.fixture
def configs(tmp_path: Path) -> dict[str, Path]:
    """The example stream's configuration, and a copy with another alarm threshold."""
    paths = build_example(tmp_path / "ex", seed=4, n_calibration=100, phases=[("stable", 40)])
    data = yaml.safe_load(paths["config"].read_text())
    data["alarm"] = {"rule": "shiryaev_roberts", "threshold": 777.0}
    changed = paths["config"].with_name("changed.yaml")
    changed.write_text(yaml.safe_dump(data))
    return {"config": paths["config"], "changed": changed, "events": paths["events"]}


def stored(capsys: pytest.CaptureFixture[str], db: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["--db", db, "streams", "list", "--json"]) == 0
    [stream] = json.loads(capsys.readouterr().out)
    return dict(stream)


def test_streams_create_refuses_a_changed_configuration(
    db: str, configs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--db", db, "streams", "create", str(configs["config"])]) == 0
    assert stored(capsys, db)["version"] == 1
    # The same configuration again: accepted silently, nothing changes.
    assert main(["--db", db, "streams", "create", str(configs["config"])]) == 0
    assert "already registered" in capsys.readouterr().out
    # A changed one: refused in one line that points to `streams update`.
    assert main(["--db", db, "streams", "create", str(configs["changed"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "monitor streams update" in err and "PUT /streams/" in err
    assert stored(capsys, db)["config"]["alarm"]["threshold"] == 10_000.0


def test_run_with_config_refuses_a_changed_configuration(
    db: str, configs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    run = ["--db", db, "run", "--source", f"file:{configs['events']}", "--json", "--config"]
    assert main([*run, str(configs["config"])]) == 0
    assert main([*run, str(configs["config"])]) == 0  # every start re-reads it: identical is fine
    capsys.readouterr()
    assert main([*run, str(configs["changed"])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "monitor streams update" in err
    now = stored(capsys, db)
    assert (now["version"], now["config"]["alarm"]["threshold"]) == (1, 10_000.0)


def test_streams_update_stores_a_new_version(
    db: str, configs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--db", db, "streams", "update", str(configs["config"])]) == 2  # not registered
    assert "monitor streams create" in capsys.readouterr().err
    assert main(["--db", db, "streams", "create", str(configs["config"])]) == 0
    assert main(["--db", db, "streams", "update", str(configs["changed"])]) == 0
    assert "version 2" in capsys.readouterr().out
    assert main(["--db", db, "streams", "update", str(configs["changed"])]) == 0  # no change
    assert "unchanged at version 2" in capsys.readouterr().out
    now = stored(capsys, db)
    assert (now["version"], now["config"]["alarm"]["threshold"]) == (2, 777.0)
    # The new version is what `run --config` now accepts silently.
    run = ["--db", db, "run", "--source", f"file:{configs['events']}", "--json", "--config"]
    assert main([*run, str(configs["changed"])]) == 0


def test_a_registered_stream_keeps_the_defaults_it_was_registered_with(
    db: str, configs: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Upgrades (docs/operations.md "Changed defaults"): the stored configuration has every
    default filled in, so a release that changes a default leaves registered streams as they
    were; re-registering the YAML that relied on the old default is refused until `streams
    update` takes the new one."""
    data = yaml.safe_load(configs["config"].read_text())
    del data["alarm"]  # relies on the default alarm rule
    plain = configs["config"].with_name("plain.yaml")
    plain.write_text(yaml.safe_dump(data))
    assert main(["--db", db, "streams", "create", str(plain)]) == 0
    assert stored(capsys, db)["config"]["alarm"]["false_alarm_every"] == 7 * 86400  # the default
    # A stream registered by an older release, whose default was a threshold of 10 000:
    engine = make_engine(db)
    with session_factory(engine)() as session, session.begin():
        row = session.get(StreamRow, data["name"])
        assert row is not None
        old = {**row.config["alarm"], "threshold": 10_000.0, "false_alarm_every": None,
               "events": None}  # (the time budget's events part is filled in with it today)
        del old["min_threshold"]  # a field that release did not have
        row.config = {**row.config, "alarm": old}
    engine.dispose()
    loaded = StreamConfig.model_validate({**stored(capsys, db)["config"], "calibration": []})
    assert (loaded.alarm.threshold, loaded.alarm.false_alarm_every) == (10_000.0, None)
    assert main(["--db", db, "streams", "create", str(plain)]) == 2
    assert "monitor streams update" in capsys.readouterr().err
    assert main(["--db", db, "streams", "update", str(plain)]) == 0
    now = stored(capsys, db)
    assert (now["version"], now["config"]["alarm"]["false_alarm_every"]) == (2, 7 * 86400)
    assert now["config"]["alarm"]["threshold"] is None


# --- API ------------------------------------------------------------------------------------------


def changed_config(name: str) -> dict[str, Any]:
    return stream_config(name) | {"alarm": {"rule": "shiryaev_roberts", "threshold": 777.0}}


def test_post_of_an_identical_configuration_is_accepted(client: TestClient,
                                                        session: Session) -> None:
    assert client.post("/streams", json=stream_config("bikes"), headers=WRITE).status_code == 201
    again = client.post("/streams", json=stream_config("bikes"), headers=WRITE)
    assert again.status_code == 200 and again.json()["version"] == 1


def test_post_of_a_changed_configuration_is_409_and_changes_nothing(
    client: TestClient, session: Session
) -> None:
    assert client.post("/streams", json=stream_config("bikes"), headers=WRITE).status_code == 201
    response = client.post("/streams", json=changed_config("bikes"), headers=WRITE)
    assert response.status_code == 409
    assert "PUT /streams/bikes" in response.json()["detail"]
    body = client.get("/streams/bikes", headers=READ).json()
    assert body["version"] == 1 and body["config"]["alarm"]["false_alarm_every"] == 604_800.0


def test_put_stores_a_new_version(client: TestClient, session: Session) -> None:
    assert client.put("/streams/bikes", json=stream_config("bikes"), headers=WRITE
                      ).status_code == 404
    assert client.post("/streams", json=stream_config("bikes"), headers=WRITE).status_code == 201
    response = client.put("/streams/bikes", json=changed_config("bikes"), headers=WRITE)
    assert response.status_code == 200, response.text
    assert response.json()["version"] == 2
    body = client.get("/streams/bikes", headers=READ).json()
    assert body["version"] == 2 and body["config"]["alarm"]["threshold"] == 777.0
    same = client.put("/streams/bikes", json=changed_config("bikes"), headers=WRITE)
    assert same.status_code == 200 and same.json()["version"] == 2  # unchanged: no new version
    row = session.get(StreamRow, "bikes")
    assert row is not None and row.version == 2
    # New calibration rows are a new version too.
    rows = stream_config("bikes")["calibration"][:-1]
    again = client.put("/streams/bikes", json=changed_config("bikes") | {"calibration": rows},
                       headers=WRITE)
    assert again.json()["version"] == 3 and again.json()["calibration_events"] == len(rows)


def test_put_needs_the_name_of_the_path(client: TestClient, session: Session) -> None:
    assert client.post("/streams", json=stream_config("bikes"), headers=WRITE).status_code == 201
    response = client.put("/streams/bikes", json=stream_config("other"), headers=WRITE)
    assert response.status_code == 422
    assert client.put("/streams/bikes", json=stream_config("bikes"), headers=READ
                      ).status_code == 403


def test_a_budget_registered_before_the_floor_keeps_its_thresholds_until_updated(
    db: str, configs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Migration 0016 stores ``min_threshold: 2`` in budgets registered before the field
    existed (tests/db/test_db_migrations.py); such a stream then runs as before, and the YAML
    that relies on the new default (100 000) is refused until `streams update` stores it."""
    data = yaml.safe_load(configs["config"].read_text())
    del data["alarm"], data["covariate_alarm"]  # the default: a weekly budget with its floor
    plain = configs["config"].with_name("plain.yaml")
    plain.write_text(yaml.safe_dump(data))
    assert main(["--db", db, "streams", "create", str(plain)]) == 0
    assert stored(capsys, db)["config"]["alarm"]["min_threshold"] == 100_000.0
    engine = make_engine(db)
    with session_factory(engine)() as session, session.begin():  # as migration 0016 leaves it
        row = session.get(StreamRow, data["name"])
        assert row is not None
        row.config = {**row.config, "alarm": {**row.config["alarm"], "min_threshold": 2.0}}
    engine.dispose()
    assert main(["--db", db, "streams", "create", str(plain)]) == 2
    assert "monitor streams update" in capsys.readouterr().err
    assert main(["--db", db, "streams", "update", str(plain)]) == 0
    now = stored(capsys, db)
    assert (now["version"], now["config"]["alarm"]["min_threshold"]) == (2, 100_000.0)
