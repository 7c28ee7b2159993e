"""``monitor fleets create FILE`` and ``monitor fleets run NAME --once`` on a real database."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.models import TracePointRow

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_create_then_run_once_stores_the_fleet_alarm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path}/m.db"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "name: payments\nrule: e_d_bonferroni\nalpha: 0.01\n"
        "members: [a/conditional, b/conditional]\n"
    )
    assert main(["db", "upgrade", "--db", db]) == 0
    assert main(["fleets", "create", str(fleet), "--db", db]) == 0
    assert "fleet 'payments' registered: e_d_bonferroni at level 0.01 over 2 members" in (
        capsys.readouterr().out
    )
    engine = make_engine(db)
    with session_factory(engine)() as session:
        for i, value in enumerate([10.0, 300.0]):  # bar K/alpha = 200
            session.add(TracePointRow(
                stream="a", detector="conditional", event_index=i, ts=T0 + timedelta(seconds=i),
                log_statistic=math.log(value),
            ))
        session.commit()
    engine.dispose()
    assert main(["fleets", "run", "payments", "--once", "--db", db]) == 0
    assert "fleet alarm a/conditional R=300 >= 200 (e_d_bonferroni)" in capsys.readouterr().out
    assert main(["alarms", "list", "--json", "--db", db]) == 0
    assert '"stream": "a"' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: f\nmembers: [nodetector]\n", "'stream/detector'"),
        ("name: f\nrule: holm\nmembers: [a/conditional]\n", "rule"),
        ("name: f\nalpha: 2\nmembers: [a/conditional]\n", "alpha"),
    ],
    ids=["member", "rule", "alpha"],
)
def test_a_bad_fleet_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(text)
    assert main(["fleets", "create", str(fleet), "--db", f"sqlite:///{tmp_path}/m.db"]) == 2
    err = capsys.readouterr().err
    assert "invalid fleet file" in err and message in err and "Traceback" not in err


def test_running_an_unknown_fleet_says_how_to_create_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path}/m.db"
    assert main(["fleets", "run", "ghost", "--once", "--db", db]) == 2
    assert "monitor fleets create FILE" in capsys.readouterr().err
