"""The tabular-data alarm kinds (issue #27) in the HTTP API: ``GET /alarms?kind=data_quality``,
``?kind=schema_change``, ``?detector=data_quality`` / ``schema``, the alarm's evidence as
stored, and the OpenAPI document listing every kind and detector."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import READ, alarm, store
from monitor.streams.records import ALARM_KINDS, DETECTORS, Alarm, iso
from tests.support.tabular_alarms import T0, tabular_alarms


@pytest.fixture
def alarms(session: Session) -> list[Alarm]:
    """The tabular alarms of fraud-eu beside ten alarms of the other kinds."""
    records = [*tabular_alarms(), *(alarm("bikes", i) for i in range(10))]
    store(session, alarms=records)
    return records


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"kind": "data_quality"}, [("data_quality", "data_quality")]),
        ({"detector": "data_quality"}, [("data_quality", "data_quality")]),
        ({"kind": "schema_change"}, [("schema", "schema_change")] * 2),
        ({"detector": "schema", "stream": "fraud-eu"}, [("schema", "schema_change")] * 2),
        ({"kind": "data_quality", "stream": "bikes"}, []),
    ],
    ids=["kind-data_quality", "detector-data_quality", "kind-schema_change", "detector-schema",
         "other-stream"],
)
def test_alarms_filter_by_the_new_kinds_and_detectors(
    client: TestClient, alarms: list[Alarm], params: dict[str, Any],
    expected: list[tuple[str, str]],
) -> None:
    response = client.get("/alarms", params=params, headers=READ)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [(a["detector"], a["kind"]) for a in body["data"]] == expected
    assert body["count"] == len(expected)


def test_the_stored_evidence_is_served(client: TestClient, alarms: list[Alarm]) -> None:
    for record in alarms[:4]:
        body = client.get(f"/alarms/{record.id}", headers=READ).json()
        assert body["kind"] == record.kind and body["evidence"] == record.evidence
    newest = client.get("/alarms", params={"stream": "fraud-eu", "limit": 1}, headers=READ)
    assert newest.json()["data"][0]["evidence"]["indicators"][0]["feature"] == "area"
    assert newest.json()["data"][0]["ts"] == iso(T0 + timedelta(minutes=3))


def test_an_unknown_kind_is_refused(client: TestClient) -> None:
    response = client.get("/alarms", params={"kind": "data-quality"}, headers=READ)
    assert response.status_code == 422
    assert "data_quality" in response.text and "schema_change" in response.text


def test_openapi_lists_every_kind_and_detector(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    (alarms,) = [op for path, item in document["paths"].items() for method, op in item.items()
                 if path == "/alarms" and method == "get"]
    parameters = {p["name"]: p["schema"] for p in alarms["parameters"]}
    assert _enum(parameters["kind"]) == list(ALARM_KINDS)
    assert _enum(parameters["detector"]) == list(DETECTORS)
    assert {"data_quality", "schema_change"} <= set(ALARM_KINDS)
    assert {"data_quality", "schema"} <= set(DETECTORS)
    described = document["components"]["schemas"]["AlarmPublic"]["properties"]
    for kind in ALARM_KINDS:
        assert f"`{kind}`" in described["kind"]["description"]
    for detector in DETECTORS:
        assert f"`{detector}`" in described["detector"]["description"]


def _enum(schema: dict[str, Any]) -> list[str]:
    """The enum of an optional parameter (``anyOf: [{enum}, {type: null}]``)."""
    options = schema.get("anyOf", [schema])
    return next(o["enum"] for o in options if "enum" in o)
