"""Routes taking an alarm id accept a prefix of it: the one alarm whose id starts with it, a
409 listing the candidates when several do, the usual 404 when none does."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import READ, WRITE, store
from tests.support.alarm_ids import SHARED, alarms_with_shared_prefixes

ROUTES = [("GET", "/alarms/{}"), ("GET", "/alarms/{}/report"), ("POST", "/alarms/{}/ack")]


@pytest.fixture
def stored(session: Session) -> None:
    store(session, alarms=alarms_with_shared_prefixes())


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_unique_prefix_names_the_alarm(
    client: TestClient, stored: None, method: str, path: str
) -> None:
    response = client.request(method, path.format("292BF01E"), headers=WRITE)
    assert response.status_code == 200
    if path.endswith("report"):
        assert f"alarm {SHARED[2]}</p>" in response.text
    else:
        assert response.json()["id"] == SHARED[2]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_an_ambiguous_prefix_is_409_with_the_candidates(
    client: TestClient, stored: None, method: str, path: str
) -> None:
    response = client.request(method, path.format("292b"), headers=WRITE)
    assert response.status_code == 409
    body = response.json()
    assert body["candidates"] == sorted(SHARED)
    assert body["detail"].startswith("alarm id '292b' is the start of 3 alarm ids")


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_an_unknown_or_too_short_prefix_is_404(
    client: TestClient, stored: None, method: str, path: str
) -> None:
    for text, hint in (("292c", ""), ("bikes", ""),
                       ("292", " (a prefix names an alarm from 4 hexadecimal digits on)")):
        response = client.request(method, path.format(text), headers=WRITE)
        assert response.status_code == 404
        assert response.json()["detail"] == f"no alarm with id {text!r}{hint}"


def test_the_409_is_documented(client: TestClient) -> None:
    paths = client.get("/openapi.json", headers=READ).json()["paths"]
    for method, path in ROUTES:
        answers = paths[path.format("{alarm_id}")][method.lower()]["responses"]
        schema = answers["409"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/AmbiguousIdResponse"}
