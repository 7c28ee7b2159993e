"""The alarm report (monitor/ops/report.py) on real alarms of the Shuttle stream, and
``monitor report``."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from monitor.cli.main import main
from monitor.db.errors import AlarmNotFoundError
from monitor.ops.report import (
    check_performance,
    render_html,
    render_png,
    report_context,
    trace_window,
    write_report,
)
from monitor.ops.report.html import _render_html
from monitor.ops.report.meanings import evidence_meaning
from tests.support.real_alarms import ReportDatabase, performance_windows, shuttle_records

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _sections(page: str) -> list[str]:
    return re.findall(r'<section id="([a-z]+)"', page)


def test_the_stream_raises_the_alarms_the_tests_need() -> None:
    alarms, _ = shuttle_records()
    kinds = {(a.detector, a.kind) for a in alarms}
    assert ("conditional", "concept_shift") in kinds
    assert ("covariate", "extreme_covariate_shift") in kinds


def test_context_holds_both_traces_around_each_alarm(report_db: ReportDatabase) -> None:
    _, traces = shuttle_records()
    with report_db.session() as session:
        for alarm in report_db.alarms:
            context = report_context(session, alarm.id)
            start, stop = context.window
            assert context.window == trace_window(alarm)
            assert start <= min(alarm.event_index, alarm.changepoint or alarm.event_index)
            assert stop > alarm.event_index
            for detector in ("covariate", "conditional"):
                expected = sorted(
                    (t.event_index, t.log_statistic) for t in traces
                    if t.detector == detector and start <= t.event_index < stop
                )
                got = [(t.event_index, t.log_statistic) for t in context.traces[detector]]
                assert got == expected and got, detector
            at_alarm = [t for t in context.traces[alarm.detector]
                        if t.event_index == alarm.event_index]
            assert at_alarm and at_alarm[0].log_statistic >= at_alarm[0].log_threshold
            assert context.alarm == alarm and context.performance is None


def test_page_shows_diagnosis_threshold_changepoint_and_evidence(
    report_db: ReportDatabase,
) -> None:
    with report_db.session() as session:
        for alarm in report_db.alarms:
            if alarm is report_db.explained:
                continue
            page = render_html(report_context(session, alarm.id))
            # alarms raised while the weighted monitor adapts carry its density ratio's directions
            directions = ["directions"] if "density_ratio_directions" in alarm.evidence else []
            assert _sections(page) == ["diagnosis", "evidence", *directions]
            assert page.count("<svg") == 1  # both traces, one figure
            assert f'<span class="kind {alarm.kind}">{alarm.kind}</span>' in page
            assert f"{alarm.statistic:.4g} ≥ {alarm.threshold:.4g}" in page
            assert f"event index {alarm.changepoint} (" in page
            for key in ("outside_support_fraction", "log_statistic", "config_version"):
                assert f"<th>{key}</th>" in page
            value = alarm.evidence["outside_support_fraction"]
            assert f'<td class="n">{value:.4g}</td>' in page


def test_attribution_and_directions_render_when_present(report_db: ReportDatabase) -> None:
    alarm = report_db.explained
    with report_db.session() as session:
        page = render_html(report_context(session, alarm.id))
    assert _sections(page) == ["diagnosis", "evidence", "attribution", "directions"]
    assert page.count("<svg") == 2
    features = alarm.evidence["attribution"]["features"]
    ranked = sorted(features, key=lambda f: f["p_adjusted"])
    shown = re.findall(r"<tr><td>(f\d)</td><td class=\"n\">[^<]*</td><td", page)  # no type column
    assert shown == [f["feature"] for f in ranked]
    for direction in alarm.evidence["density_ratio_directions"]:
        assert f'{direction["weight"]:.4g}</td>' in page


def test_performance_before_and_after_the_changepoint(report_db: ReportDatabase) -> None:
    alarm = next(a for a in report_db.alarms if a.kind == "extreme_covariate_shift"
                 and a.detector == "covariate")
    windows = performance_windows()
    with report_db.session() as session:
        context = report_context(session, alarm.id, windows)
    page = render_html(context)
    directions = ["directions"] if "density_ratio_directions" in alarm.evidence else []
    assert _sections(page) == ["diagnosis", "evidence", *directions, "performance"]
    assert page.count("<svg") == 2
    assert alarm.changepoint is not None
    cut = alarm.changepoint
    # the 2 windows nearest the changepoint on each side; the one across it in neither
    before = [w for w in windows if w["end_index"] < cut][-2:]
    after = [w for w in windows if w["start_index"] >= cut][:2]
    assert len(before) == len(after) == 2
    assert all(not (w["start_index"] < cut <= w["end_index"]) for w in before + after)
    for when, chosen in (("before", before), ("after", after)):
        n = sum(w["n"] for w in chosen)
        mae = np.average([w["metrics"]["mae"] for w in chosen], weights=[w["n"] for w in chosen])
        events = f"{chosen[0]['start_index']}–{chosen[-1]['end_index']}"
        assert f"<th>{when} (n = {n}; events {events})</th>" in page
        assert f'<td class="n">{mae:.4g}</td>' in page
    # The extreme shift (after the changepoint) breaks the model: errors 10 times larger.
    assert max(w["metrics"]["mae"] for w in after) > 10 * max(
        w["metrics"]["mae"] for w in before)


def test_performance_windows_far_from_the_alarm_are_still_compared(
    report_db: ReportDatabase,
) -> None:
    # Windows of 250 labels: none before the changepoint lies wholly inside the report's span
    # (which starts 300 events before it), one spans the changepoint; the nearest others are
    # compared.
    alarm = next(a for a in report_db.alarms if a.kind == "extreme_covariate_shift"
                 and a.detector == "covariate")
    windows = performance_windows(size=250)
    with report_db.session() as session:
        context = report_context(session, alarm.id, windows)
    before, after = context.before_after
    assert before and after
    assert before[0]["start_index"] < context.window[0]
    assert before[-1]["end_index"] < context.cut <= after[0]["start_index"]
    page = render_html(context)
    assert "(n = 0" not in page and f"(n = {250 * len(before)}; events 0–" in page


def test_too_few_labels_hide_the_comparison_with_a_sentence(report_db: ReportDatabase) -> None:
    alarm = next(a for a in report_db.alarms if a.kind == "extreme_covariate_shift"
                 and a.detector == "covariate")
    assert alarm.changepoint is not None
    windows = [w for w in performance_windows() if w["end_index"] < alarm.changepoint]
    with report_db.session() as session:
        page = render_html(report_context(session, alarm.id, windows))
    section = page[page.index('<section id="performance">'):]
    assert "Too few labels around the changepoint estimate" in section
    assert "2 windows (200 labels) end before it" in section
    assert "0 windows (0 labels) start after it" in section
    assert "<table>" not in section and "<svg" not in section


def test_every_evidence_field_is_explained(report_db: ReportDatabase) -> None:
    for alarm in report_db.alarms:
        with report_db.session() as session:
            page = render_html(report_context(session, alarm.id))
        start = page.index('<section id="evidence">')
        section = page[start:page.index("</section>", start)]
        rows = re.findall(r"<tr><th>([a-z_]+)</th><td class=\"n\">[^<]*</td>"
                          r"<td class=\"meaning\">([^<]+)</td></tr>", section)
        scalars = [k for k, v in alarm.evidence.items() if not isinstance(v, dict | list)]
        assert sorted(k for k, _ in rows) == sorted(scalars)
        assert all(meaning != evidence_meaning("no-such-field") for _, meaning in rows), rows


def test_page_is_self_contained(report_db: ReportDatabase) -> None:
    with report_db.session() as session:
        page = render_html(report_context(session, report_db.explained.id, performance_windows()))
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["'](?!#)""", page)
    assert "url(" not in page.replace("url(#", "")
    assert "@import" not in page


def test_same_context_renders_the_same_page(report_db: ReportDatabase) -> None:
    """Rendering is deterministic (no date, a fixed SVG salt): what makes keeping the last
    pages by context digest correct; any change to the context is a new page."""
    with report_db.session() as session:
        context = report_context(session, report_db.explained.id)
    page = _render_html(context)
    assert _render_html(context) == page == render_html(context) == render_html(context)
    acknowledged = replace(context, acknowledged="2026-01-02T00:00:00Z by bob")
    assert "by bob" in render_html(acknowledged)
    points = context.traces["covariate"]
    mid = len(points) // 2  # a point in the middle of the plotted span
    fewer = replace(context, traces={**context.traces,
                                     "covariate": points[:mid] + points[mid + 1:]})
    assert render_html(fewer) == _render_html(fewer) != page


def test_png_report(report_db: ReportDatabase, tmp_path: Path) -> None:
    with report_db.session() as session:
        context = report_context(session, report_db.explained.id, performance_windows())
    data = render_png(context)
    assert data.startswith(PNG_MAGIC)
    from matplotlib.image import imread

    image = imread(write_report(context, tmp_path / "r.png"))
    # traces (2) + attribution + two performance panels, each 2.6 inches at 100 dpi
    assert image.shape[0] == round((2.6 * 5 + 1.0) * 100)
    assert float(image[..., :3].std()) > 0.05  # drawn, not blank


def test_unknown_alarm_and_bad_input(report_db: ReportDatabase, tmp_path: Path) -> None:
    with report_db.session() as session, pytest.raises(AlarmNotFoundError, match="nope"):
        report_context(session, "nope")
    with pytest.raises(ValueError, match=r"performance window 0 lacks \['n'"):
        check_performance([{k: v for k, v in performance_windows()[0].items() if k != "n"}])
    bad = performance_windows()[:1]
    bad[0]["metrics"] = {"mae": "high"}
    with pytest.raises(ValueError, match="'metrics' must map names to numbers"):
        check_performance(bad)
    with report_db.session() as session:
        context = report_context(session, report_db.alarms[0].id)
    with pytest.raises(ValueError, match=r"must end in \.html or \.png"):
        write_report(context, tmp_path / "r.pdf")


def test_alarm_without_changepoint_or_trace(report_db: ReportDatabase) -> None:
    with report_db.session() as session:
        context = report_context(session, report_db.alarms[0].id)
    alarm = replace(context.alarm, changepoint=None, evidence={"note": "x", "nan": math.nan})
    page = render_html(replace(context, alarm=alarm, traces={}))
    assert "unknown" in page and "no trace points stored in this window" not in page.split(
        "<svg")[0]
    assert "<svg" in page


def test_cli_writes_html_and_png(report_db: ReportDatabase, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    alarm = report_db.explained
    html_path, png_path = tmp_path / "a.html", tmp_path / "a.png"
    for path in (html_path, png_path):
        code = main(["--db", report_db.url, "report", "--alarm", alarm.id, "--out", str(path)])
        assert code == 0
        assert f"report of alarm {alarm.id}: {path}" in capsys.readouterr().out
    assert 'id="attribution"' in html_path.read_text(encoding="utf-8")
    assert png_path.read_bytes().startswith(PNG_MAGIC)


def test_cli_errors_are_one_line(report_db: ReportDatabase, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--alarm", "nope", "--db", report_db.url]) == 2
    err = capsys.readouterr().err
    assert err == "monitor: error: no alarm with id 'nope' (see `monitor alarms list`)\n"
    out = str(tmp_path / "a.pdf")
    assert main(["report", "--alarm", "x", "--out", out, "--db", report_db.url]) == 2
    assert "--out must end in .html or .png" in capsys.readouterr().err
