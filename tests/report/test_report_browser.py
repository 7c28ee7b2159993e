"""The alarm report opened in headless Chromium: no console error, no network request, every
figure rendered, and a screenshot (kept under the test's tmp folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.ops.report import report_context, write_report
from monitor.ops.report.html import report_title
from tests.support.browser import find_chromium, open_page
from tests.support.real_alarms import ReportDatabase, performance_windows

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium found (install Debian's package: apt-get install chromium; .ci/run does)",
)


def test_report_renders_in_chromium(report_db: ReportDatabase, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    with report_db.session() as session:
        context = report_context(session, report_db.explained.id, performance_windows())
    page = write_report(context, tmp_path / "report.html")
    shot = tmp_path / "report.png"
    seen = open_page(CHROMIUM, page, shot)
    assert seen.errors == []
    assert seen.requests == [], "the report must not load anything"
    assert seen.title == report_title(context.alarm)
    assert seen.title.startswith(f"{context.alarm.stream}: concept shift (")
    # traces, attribution, performance: every one laid out and drawn
    assert [f["tag"] for f in seen.figures] == ["svg", "svg", "svg"]
    for figure in seen.figures:
        assert figure["width"] > 300 and figure["height"] > 150, figure
        assert figure["shapes"] > 20, figure
    from matplotlib.image import imread

    image = imread(shot)
    assert image.shape[0] > 1500 and image.shape[1] >= 1000  # the full page, not the viewport
    assert float(image[..., :3].std()) > 0.05
