"""HTTP request metrics: counted by method, route *template* and status, and timed."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

from bench.api_rows import READ


def _samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics", headers=READ).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_requests_are_counted_by_route_template(client: TestClient, session: Session) -> None:
    before = _samples(client)
    for alarm_id in ("0a1b", "ffff", "1234"):
        assert client.get(f"/alarms/{alarm_id}", headers=READ).status_code in (404, 422)
    assert client.get("/alarms/0a1b").status_code == 401  # refused before routing
    assert client.get("/no/such/path/42", headers=READ).status_code == 404
    after = _samples(client)

    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    template = "/alarms/{alarm_id}"
    answered = sum(
        delta("monitor_http_requests_total", method="GET", route=template, status=status)
        for status in ("404", "422")
    )
    assert answered == 3
    assert delta("monitor_http_requests_total", method="GET", route=template, status="401") == 1
    assert delta("monitor_http_requests_total", method="GET", route="unmatched",
                 status="404") == 1
    assert delta("monitor_http_request_seconds_count", method="GET", route=template) == 4
    routes = {dict(labels).get("route") for name, labels in after
              if name.startswith("monitor_http_")}
    assert not any(r and ("0a1b" in r or "ffff" in r or "/no/such" in r) for r in routes)
    assert ("process_cpu_seconds_total", ()) in after
