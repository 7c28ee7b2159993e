"""/fleets: register (write), list and read fleets; errors are 404 / 409 / 422."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from bench.api_rows import READ, WRITE

BODY = {
    "name": "payments",
    "rule": "e_d_bonferroni",
    "alpha": 0.001,
    "members": ["bikes/conditional", "taxis/conditional", "taxis/covariate"],
}


def test_register_list_and_read(client: TestClient, session: Session) -> None:
    created = client.post("/fleets", json=BODY, headers=WRITE)
    assert created.status_code == 201, created.text
    assert created.json()["members"] == BODY["members"]
    assert created.json()["evaluated_through"] is None
    listed = client.get("/fleets", headers=READ).json()
    assert listed["count"] == 1 and listed["data"][0]["rule"] == "e_d_bonferroni"
    one = client.get("/fleets/payments", headers=READ).json()
    assert (one["name"], one["alpha"]) == ("payments", 0.001)


def test_errors(client: TestClient, session: Session) -> None:
    assert client.post("/fleets", json=BODY, headers=READ).status_code == 403
    assert client.post("/fleets", json=BODY, headers=WRITE).status_code == 201
    again = client.post("/fleets", json=BODY, headers=WRITE)
    assert again.status_code == 409 and "exists already" in again.text
    bad = client.post("/fleets", json=BODY | {"name": "x", "members": ["nodetector"]},
                      headers=WRITE)
    assert bad.status_code == 422 and "stream/detector" in bad.text
    rule = client.post("/fleets", json=BODY | {"name": "y", "rule": "holm"}, headers=WRITE)
    assert rule.status_code == 422
    assert client.get("/fleets/ghost", headers=READ).status_code == 404
