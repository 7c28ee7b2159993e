"""The demo's reports as a person reads them: features by their names, performance compared
over real label counts, and the whole path in headless Chromium — a report link sends the
browser to the login page, the token pasted there opens the report, ``/docs`` renders — with
no console error and nothing loaded from another server."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.api import create_app
from monitor.cli.main import main
from monitor.ops.report.meanings import evidence_meaning
from monitor.settings import Settings
from tests.support.browser import browse, find_chromium
from tests.support.live_server import live_server

CHROMIUM = find_chromium()
TOKEN = "browser-read-token-0123"
SHUTTLE = ["f2", "f3", "f4", "f6", "f7"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def server(demo: Path) -> Iterator[str]:
    settings = Settings(database_url=f"sqlite:///{demo / 'demo.db'}", api_tokens=f"read:{TOKEN}",
                        auto_migrate=False)
    with live_server(create_app(settings)) as base:
        yield base


def _alarms(demo: Path) -> list[tuple[str, int, str]]:
    with sqlite3.connect(demo / "demo.db") as db:
        return db.execute("SELECT id, event_index, detector FROM alarms "
                          "ORDER BY event_index, detector").fetchall()


def test_demo_reports_name_features_and_compare_real_windows(demo: Path) -> None:
    reports = sorted((demo / "reports").glob("alarm-*.html"))
    assert [r.name for r in reports] == [f"alarm-{i:06d}-{d}.html" for _, i, d in _alarms(demo)]
    assert len(reports) == 4
    for report in reports:
        page = report.read_text()
        named = re.findall(r"<tr><td>(\w+)</td><td class=\"n\">", page)
        assert named and set(named) <= set(SHUTTLE), (report.name, named)
        assert "(n = 0" not in page
        assert 'class="meaning"' in page and evidence_meaning("?") not in page
        assert re.search(r"<th>before \(n = 200; events \d+–\d+\)</th>", page), report.name
        assert re.search(r"<th>after \(n = 200; events \d+–\d+\)</th>", page), report.name


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium)")
def test_login_then_report_then_docs_in_chromium(demo: Path, server: str, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    alarm, _, _ = _alarms(demo)[1]  # the concept shift
    report = f"{server}/alarms/{alarm}/report"
    with browse(CHROMIUM) as page:
        page.goto(report)  # a link from a dashboard or an alert
        assert page.evaluate("location.pathname") == "/login"
        page.screenshot(tmp_path / "login.png")
        assert page.seen().errors == []
        page.submit(f"document.getElementById('token').value = {TOKEN!r};"
                    "document.querySelector('form').submit()")
        assert page.evaluate("location.href") == report
        seen = page.seen()
        assert seen.title.startswith(f"Alarm {alarm}")
        assert page.evaluate("document.querySelectorAll('svg').length") == 2  # traces, performance
        assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads the session
        page.screenshot(tmp_path / "report.png")
        assert seen.errors == []
        assert all(r.startswith(server) for r in seen.requests), seen.requests
        # The session reads; it cannot write, even from a page of this server.
        assert page.evaluate("fetch('/alarms').then(r => r.status)") == 200
        assert page.evaluate(f"fetch('/alarms/{alarm}/ack', {{method: 'POST', body: '{{}}', "
                             "headers: {'Content-Type': 'application/json'}}).then(r => r.status)"
                             ) == 401

        page.goto(f"{server}/docs")
        page.wait_until("document.querySelectorAll('.opblock').length >= 10")
        page.screenshot(tmp_path / "docs.png")
        seen = page.seen()
        assert seen.errors == []
        assert seen.requests and all(r.startswith(server) for r in seen.requests), seen.requests
    from matplotlib.image import imread

    for shot, height in (("login.png", 300), ("report.png", 1500), ("docs.png", 1500)):
        image = imread(tmp_path / shot)
        assert image.shape[0] >= height and float(image[..., :3].std()) > 0.05, shot
