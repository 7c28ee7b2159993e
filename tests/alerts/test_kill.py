"""A ``monitor run`` killed (SIGKILL) while a receiver holds its first delivery: every alarm is
delivered after the restart, the one in flight twice under the same idempotency key."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from monitor.cli.main import main
from monitor.db.engine import make_engine, session_factory
from monitor.db.models import AlarmRow, AlertOutboxRow
from monitor.ops.datasets import build_example
from tests.support.receivers import Receiver

ROOT = Path(__file__).resolve().parents[2]
RUN = "import sys; from monitor.cli.main import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.slow
def test_deliveries_survive_a_sigkill_mid_delivery(tmp_path: Path, receiver: Receiver) -> None:
    paths = build_example(tmp_path, seed=1, phases=[("stable", 200), ("concept", 300)],
                          n_calibration=300, alarm={"rule": "shiryaev_roberts", "threshold": 200})
    routes = tmp_path / "alerts.json"
    routes.write_text(json.dumps({
        "receivers": [{"name": "hook", "type": "webhook", "url": receiver.url("/hook")}],
        "routes": [{"receivers": ["hook"]}],
        "delivery": {"timeout_seconds": 2, "claim_lease_seconds": 3, "backoff_seconds": 0.1},
    }))
    db = f"sqlite:///{tmp_path}/m.db"
    argv = ["run", "--source", f"file:{paths['events']}", "--config", str(paths["config"]),
            "--alerts", str(routes), "--db", db]
    receiver.open.clear()  # the receiver takes the first delivery and does not answer
    process = subprocess.Popen([sys.executable, "-c", RUN, *argv], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not receiver.on("/hook"):
            assert process.poll() is None, process.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no delivery was attempted"
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
        receiver.open.set()
    in_flight = receiver.on("/hook")[0].headers["X-Monitor-Idempotency-Key"]
    engine = make_engine(db)
    with session_factory(engine)() as session:
        alarms = set(session.scalars(select(AlarmRow.id)))
        queued = list(session.scalars(select(AlertOutboxRow)))
    assert alarms and {row.alarm_id for row in queued} == alarms
    assert {row.status for row in queued} == {"pending"}
    time.sleep(3.1)  # the killed process's claims expire
    assert main(argv) == 0  # the restart: the file is processed already, the outbox is not
    with session_factory(engine)() as session:
        assert set(session.scalars(select(AlertOutboxRow.status))) == {"delivered"}
    engine.dispose()
    keys = [r.headers["X-Monitor-Idempotency-Key"] for r in receiver.on("/hook")]
    assert sorted(set(keys)) == sorted(f"{a}:1" for a in alarms)
    assert keys.count(in_flight) >= 2  # at-least-once: the receiver de-duplicates by key
