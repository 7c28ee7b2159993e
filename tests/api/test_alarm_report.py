"""GET /alarms/{id}/report: the alarm report as one HTML page, on real alarms in PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import READ, store
from monitor.db import queries
from monitor.ops.report import render_html, report_context
from tests.support.real_alarms import attribution, shuttle_records


def test_report_is_the_html_page_of_the_alarm(client: TestClient, session: Session) -> None:
    alarms, traces = shuttle_records()
    concept = next(a for a in alarms if a.kind == "concept_shift")
    assert concept.changepoint is not None
    explained = replace(concept, evidence={
        **concept.evidence, "attribution": attribution(concept.changepoint, concept.event_index)})
    stored = [explained if a.id == concept.id else a for a in alarms]
    store(session, alarms=stored, trace_points=list(traces))
    queries.acknowledge_alarm(session, concept.id, by="alice")
    for alarm in stored:
        response = client.get(f"/alarms/{alarm.id}/report", headers=READ)
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        session.expire_all()
        assert response.text == render_html(report_context(session, alarm.id))
        assert f'<span class="kind {alarm.kind}">' in response.text
        assert ('id="attribution"' in response.text) == (alarm.id == concept.id)
    page = client.get(f"/alarms/{concept.id}/report", headers=READ).text
    assert "by alice" in page


def test_unknown_alarm_and_no_token(client: TestClient, session: Session) -> None:
    response = client.get("/alarms/nope/report", headers=READ)
    assert response.status_code == 404
    assert response.json()["detail"] == "no alarm with id 'nope'"
    assert client.get("/alarms/nope/report").status_code == 401
