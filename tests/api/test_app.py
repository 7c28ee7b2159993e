"""The app factory: the OpenAPI document is complete, and the embedded default (SQLite) works
end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from bench.api_rows import READ, WRITE, calibration_rows, make_settings, stream_config
from monitor.api import create_app
from monitor.api.auth import PUBLIC_PATHS

OPENAPI = create_app(make_settings("sqlite://")).openapi()
OPERATIONS = [
    (path, method, operation)
    for path, item in OPENAPI["paths"].items()
    for method, operation in item.items()
]


def _ids() -> list[str]:
    return [f"{m.upper()} {p}" for p, m, _ in OPERATIONS]


@pytest.mark.parametrize(("path", "method", "operation"), OPERATIONS, ids=_ids())
def test_every_operation_is_documented(path: str, method: str, operation: dict[str, Any]) -> None:
    assert operation.get("summary") and operation.get("description")
    assert operation.get("tags")
    success = [s for s in operation["responses"] if s.startswith("2")]
    assert success, "a success response is documented"
    protected = path not in PUBLIC_PATHS
    assert ("security" in operation) == protected
    if protected:
        assert "401" in operation["responses"]
    if method == "post":
        assert {"403", "413"} <= set(operation["responses"])
    if "requestBody" in operation:
        content = operation["requestBody"]["content"]["application/json"]
        schema = content["schema"]
        examples = content.get("examples") or _schema_examples(schema)
        assert examples, "the request body has an example"


def _schema_examples(schema: dict[str, Any]) -> Any:
    ref = schema.get("$ref") or next(
        (s.get("$ref") for s in schema.get("anyOf", []) if "$ref" in s), None
    )
    if ref is None:
        return schema.get("examples")
    return OPENAPI["components"]["schemas"][ref.rsplit("/", 1)[1]].get("examples")


@pytest.mark.parametrize(
    "name", ["AlarmPublic", "StreamPublic", "TracePointPublic", "OODWindowPublic", "EventsAccepted"]
)
def test_response_schemas_have_examples(name: str) -> None:
    assert OPENAPI["components"]["schemas"][name]["examples"]


def test_bearer_scheme_is_declared() -> None:
    scheme = OPENAPI["components"]["securitySchemes"]["BearerToken"]
    assert scheme == scheme | {"type": "http", "scheme": "bearer"}


def test_embedded_sqlite_default_works_end_to_end(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/monitor.db"
    with TestClient(create_app(make_settings(url, auto_migrate=True))) as client:
        assert client.get("/health").json()["database"] == "ok"
        body = stream_config("bikes", calibration=calibration_rows(60))
        assert client.post("/streams", json=body, headers=WRITE).status_code == 201
        batch = [
            {
                "kind": "prediction",
                "stream": "bikes",
                "id": f"e-{i}",
                "features": [0.1, i, 1],
                "prediction": 1.0 + i,
                "label": 1.0,
            }
            for i in range(30)
        ]
        accepted = client.post("/events", json=batch, headers=WRITE).json()
        assert accepted["accepted"] == 30
        assert client.get("/streams/bikes", headers=READ).json()["events"] == 30
        trace = client.get("/streams/bikes/trace", params={"max_points": 2}, headers=READ)
        assert trace.status_code == 200 and trace.json()["count"] <= 4
        assert client.get("/alarms", headers=READ).status_code == 200
        assert "monitor_events_processed_total" in client.get("/metrics", headers=READ).text
