"""The report of the tabular-data alarms (issue #27), on hand-built alarms with the design's
evidence: a ``data_quality`` alarm (features, rates before and after, changepoint), a
``schema_change`` alarm (the key) and a covariate alarm whose attribution has a categorical
feature (its category frequencies before and after); HTML, PNG and headless Chromium."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.store import persist_batch
from monitor.engine.batch import Batch
from monitor.ops.report import ReportContext, render_html, render_png, report_context, write_report
from monitor.ops.report.html import report_title
from monitor.streams.records import Alarm, TracePoint
from tests.support.browser import find_chromium, open_page
from tests.support.tabular_alarms import STREAM, T0, tabular_alarms

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHROMIUM = find_chromium()


@dataclass(frozen=True)
class TabularDatabase:
    engine: Engine
    alarms: dict[str, Alarm]  # by kind ("schema_change": the new key's)

    def context(self, kind: str) -> ReportContext:
        with session_factory(self.engine)() as session:
            return report_context(session, self.alarms[kind].id)


def _traces() -> list[TracePoint]:
    """Every 10th event of 0..1990 for the covariate, conditional and data-quality detectors;
    the data-quality statistic climbs from the changepoint (1200) to past its threshold."""
    points = []
    for detector in ("covariate", "conditional", "data_quality"):
        for i in range(0, 2000, 10):
            climb = max(0.0, (i - 1200) / 25.0) if detector == "data_quality" else 0.0
            log_s = math.log(2.0 + math.sin(i / 40.0)) + climb
            points.append(TracePoint(STREAM, detector, i, T0 + timedelta(seconds=i), log_s,
                                     0.5, log_s, math.log(1e4)))
    return points


@pytest.fixture(scope="module")
def tabular_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TabularDatabase]:
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('tabular')) / 'monitor.db'}"
    upgrade(url)
    engine = make_engine(url)
    alarms = tabular_alarms()
    session: Session
    with session_factory(engine)() as session:
        persist_batch(session, Batch(alarms=alarms, trace_points=_traces()))
    by_kind = {a.kind: a for a in reversed(alarms)}  # the first schema_change: the new key
    yield TabularDatabase(engine, by_kind)
    engine.dispose()


def _sections(page: str) -> list[str]:
    return re.findall(r'<section id="([a-z]+)"', page)


def test_data_quality_alarm_shows_features_rates_and_changepoint(
    tabular_db: TabularDatabase,
) -> None:
    context = tabular_db.context("data_quality")
    assert context.traced == ["covariate", "conditional", "data_quality"]
    page = render_html(context)
    assert _sections(page) == ["diagnosis", "quality", "evidence"]
    assert page.count("<svg") == 2  # traces (three panels), rates before and after
    assert "<th>what changed</th><td>missing rate of area 5 % → 25.1 %, unseen rate of " \
           "merchant 0.4 % → 3.1 %</td>" in page
    assert "<th>since event 1200</th>" in page
    assert ('<tr><td>area</td><td>missing</td><td class="n">5 %</td><td class="n">25.1 %</td>'
            '<td class="n">11.7</td></tr>') in page
    assert '<tr><td>merchant</td><td>unseen</td>' in page
    assert "event index 1200 (280 events before the alarm)" in page


def test_schema_change_alarm_shows_the_key(tabular_db: TabularDatabase) -> None:
    page = render_html(tabular_db.context("schema_change"))
    assert _sections(page) == ["diagnosis", "schema", "evidence"]
    assert "<th>key</th><td><code>model_version</code></td>" in page
    assert "<th>change</th><td>a key the calibration never had</td>" in page
    assert "<th>first event index</th><td>301</td>" in page
    assert "new key &#x27;model_version&#x27; since event 301" in page


def test_categorical_attribution_shows_frequencies_before_and_after(
    tabular_db: TabularDatabase,
) -> None:
    page = render_html(tabular_db.context("extreme_covariate_shift"))
    assert _sections(page) == ["diagnosis", "evidence", "attribution"]
    assert page.count("<svg") == 3  # traces, attribution, the frequencies of `country`
    shown = re.findall(r"<tr><td>(\w+)</td><td>(\w+)</td><td>(\w+)</td>", page)
    assert shown == [("country", "categorical", "g_test"), ("amount", "numeric", "ks"),
                     ("area", "missing", "fisher_exact")]
    assert '<td class="n">1.2e-11</td>' in page  # the design's adjusted_p_value
    assert '<td class="n">0.42</td>' in page  # today's p_adjusted
    assert "<h3>country: categories before and after</h3>" in page
    for category, before, after in (("DE", "48 %", "22 %"), ("unseen", "0 %", "27 %"),
                                    ("missing", "2 %", "2 %")):
        assert (f'<tr><td>{category}</td><td class="n">{before}</td>'
                f'<td class="n">{after}</td></tr>') in page


@pytest.mark.parametrize("kind", ["data_quality", "schema_change", "extreme_covariate_shift"])
def test_png_report(tabular_db: TabularDatabase, kind: str, tmp_path: Path) -> None:
    from matplotlib.image import imread

    context = tabular_db.context(kind)
    assert render_png(context).startswith(PNG_MAGIC)
    image = imread(write_report(context, tmp_path / "r.png"))
    panels = {"data_quality": 3 + 1, "schema_change": 3, "extreme_covariate_shift": 3 + 2}[kind]
    assert image.shape[0] == round((2.6 * panels + 1.0) * 100)
    assert float(image[..., :3].std()) > 0.05


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found (apt-get install chromium)")
@pytest.mark.parametrize("kind", ["data_quality", "schema_change", "extreme_covariate_shift"])
def test_report_renders_in_chromium(tabular_db: TabularDatabase, kind: str,
                                    tmp_path: Path) -> None:
    assert CHROMIUM is not None
    page = write_report(tabular_db.context(kind), tmp_path / f"{kind}.html")
    seen = open_page(CHROMIUM, page, tmp_path / f"{kind}.png")
    assert seen.errors == [] and seen.requests == []
    assert seen.title == report_title(tabular_db.alarms[kind])
    figures = {"data_quality": 2, "schema_change": 1, "extreme_covariate_shift": 3}[kind]
    assert [f["tag"] for f in seen.figures] == ["svg"] * figures
    for figure in seen.figures:
        assert figure["width"] > 300 and figure["height"] > 100, figure
        assert figure["shapes"] > 10, figure
