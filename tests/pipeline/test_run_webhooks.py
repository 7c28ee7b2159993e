"""``monitor run`` delivers every alarm to the configured webhook (through the alert outbox),
signed, without blocking."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from monitor.cli.runs import run_source
from monitor.ops.datasets import build_example
from monitor.settings import Settings


def test_run_posts_each_alarm_to_the_webhook(tmp_path: Path) -> None:
    received: list[tuple[dict[str, Any], dict[str, str]]] = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((json.loads(body), {**self.headers, "raw": body.decode()}))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        paths = build_example(
            tmp_path,
            seed=1,
            phases=[("stable", 200), ("concept", 300)],
            n_calibration=300,
            alarm={"rule": "shiryaev_roberts", "threshold": 200},
        )
        settings = Settings(
            database_url=f"sqlite:///{tmp_path / 'm.db'}",
            webhook_urls=f"http://127.0.0.1:{server.server_port}/hook",
            webhook_secret="s3cret",
        )
        summary = run_source(
            f"file:{paths['events']}", [str(paths["config"])], "g", settings, batch_size=50
        )
    finally:
        server.shutdown()
    assert summary.alarms, "the example must raise alarms"
    # every version of every alarm (raised; revised with its kind; completed with its
    # attribution), each once; the summary holds each alarm's latest version
    keys = [f"{a['id']}:{a['revision']}" for a, _ in received]
    assert len(keys) == len(set(keys))
    assert {a["id"] for a, _ in received} == {a.id for a in summary.alarms}
    latest: dict[str, int] = {}
    for a, _ in received:
        latest[a["id"]] = max(latest.get(a["id"], 0), a["revision"])
    assert all(latest[a.id] >= a.revision for a in summary.alarms)
    for alarm, headers in received:
        # HMAC-SHA256 of "{timestamp}.{body}" (the documented scheme, recomputed here).
        signed = f"{headers['X-Monitor-Timestamp']}.{headers['raw']}".encode()
        digest = hmac.new(b"s3cret", signed, hashlib.sha256).hexdigest()
        assert headers["X-Monitor-Signature"] == f"sha256={digest}"
        assert headers["X-Monitor-Idempotency-Key"] == f"{alarm['id']}:{alarm['revision']}"
        assert alarm["kind"] in (
            "concept_shift",
            "extreme_covariate_shift",
            "benign_covariate_shift",
            "insufficient_evidence",
        )
