"""A conditional alarm raised as ``insufficient_evidence`` and revised to
``extreme_covariate_shift`` gets its feature attribution (issue #16: every extreme-covariate
alarm is attributed). Its window is the ``attribution.window`` predictions after the label that
revised it, in the per-event and the batch path alike; the completed attribution revises the
alarm once more (revision 3), stored and sent to the webhook as every version is."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from monitor.cli.runs import run_source
from monitor.db.models import AlarmRevisionRow, AlarmRow
from monitor.settings import Settings
from tests.support.pipeline_runs import assert_same, run
from tests.support.revision_example import WINDOW, revision_example


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    """The conditional alarm right after the extreme shift starts (event 150) has fewer than
    MIN_EVENTS labelled events of evidence and is revised once they arrive."""
    return revision_example(tmp_path_factory.mktemp("revision_attribution"))


def _revised_conditional(alarms: list[dict[str, Any]]) -> dict[str, Any]:
    revised = [a for a in alarms if a["detector"] == "conditional" and a["revision"] == 2
               and a["kind"] == "extreme_covariate_shift"]
    assert len(revised) == 1, "the example must revise a conditional alarm to extreme"
    return revised[0]


def test_the_window_opens_after_the_label_that_revised_it(
    example: tuple[Path, list[bytes]]
) -> None:
    config, values = example
    reference = run([config], values, 1, per_event=True)
    alarm = _revised_conditional(reference["alarms"])
    first = next(a for a in reference["alarms"] if a["id"] == alarm["id"] and a["revision"] == 1)
    assert first["kind"] == "insufficient_evidence"
    (attribution,) = [e["evidence"]["attribution"] for e in reference["evidence"]
                      if e["alarm_id"] == alarm["id"]]
    # The revising label is the one of the prediction at event index evidence_until; the
    # window starts at the first prediction after that label's record (predictions are
    # indexed in arrival order: the example has no invalid prediction).
    records = [json.loads(v) for v in values]
    revised_by = next(r["id"] for r in records if r["kind"] == "prediction"
                      and int(r["id"].split("-")[1]) == alarm["evidence"]["evidence_until"])
    position = next(k for k, r in enumerate(records)
                    if r["kind"] == "label" and r["id"] == revised_by)
    start = sum(r["kind"] == "prediction" for r in records[:position])
    assert attribution["window"] == {"start_index": start, "end_index": start + WINDOW - 1,
                                     "n": WINDOW}
    # The shift moves x1 (docs/explain.md); it is named first.
    assert attribution["features"][0]["feature"] == "x1"
    assert attribution["features"][0]["p_adjusted"] < 1e-6
    # Before the fix, the revision opened no window: only covariate alarms were attributed.
    attributed = {e["alarm_id"] for e in reference["evidence"]}
    assert alarm["id"] in attributed
    for batch in (13, 5000):
        assert_same(run([config], values, batch, per_event=False), reference)


def test_the_stored_alarm_ends_with_its_attribution(
    example: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    config, values = example
    received: list[tuple[dict[str, Any], str]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((json.loads(body), self.headers["X-Monitor-Idempotency-Key"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    events = tmp_path / "events.jsonl"
    events.write_bytes(b"\n".join(values) + b"\n")
    url = f"sqlite:///{tmp_path / 'm.db'}"
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = Settings(database_url=url,
                            webhook_urls=f"http://127.0.0.1:{server.server_port}/hook")
        run_source(f"file:{events}", [str(config)], "g", settings, batch_size=50)
    finally:
        server.shutdown()
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(AlarmRow).where(
                AlarmRow.detector == "conditional", AlarmRow.kind == "extreme_covariate_shift"
            )).all()
            (row,) = [r for r in rows if r.evidence.get("evidence_until") is not None]
            versions = connection.execute(
                select(AlarmRevisionRow.revision, AlarmRevisionRow.kind,
                       AlarmRevisionRow.evidence)
                .where(AlarmRevisionRow.alarm_id == row.id)
                .order_by(AlarmRevisionRow.revision)
            ).all()
    finally:
        engine.dispose()
    assert row.revision == 3
    assert row.evidence["attribution"]["window"]["n"] == WINDOW
    assert [(v.revision, v.kind) for v in versions] == [
        (1, "insufficient_evidence"), (2, "extreme_covariate_shift"),
        (3, "extreme_covariate_shift"),
    ]
    assert "attribution" not in versions[1].evidence
    assert versions[2].evidence["attribution"] == row.evidence["attribution"]
    # every version sent once, keyed <id>:<revision>
    keys = sorted(key for alarm, key in received if alarm["id"] == row.id)
    assert keys == [f"{row.id}:1", f"{row.id}:2", f"{row.id}:3"]
