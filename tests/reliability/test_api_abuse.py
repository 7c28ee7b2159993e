"""The HTTP API under abuse: forged tokens, SQL injection and path traversal in every path and
query parameter, oversized bodies. Every answer is a 4xx, never a 5xx, and nothing leaks or
changes in the database.

The app is the real one (``create_app``) over a fresh PostgreSQL database holding a registered
stream, alarms, trace points and OOD windows, called through FastAPI's TestClient with
``raise_server_exceptions=False`` so that a 500 is an answer to assert on, not an exception.

Complements tests/api/test_auth.py and tests/api/test_limits.py (the API engineer's: missing and
invalid tokens, 403 on every write route, declared and chunked 413), and schemathesis
(tests/api/test_schema.py in CI; ``python bench/bench_api.py --fuzz N`` for a larger budget).
Tokens are static (``MONITOR_API_TOKENS``): there is no expiry to test; rotation is a restart
with the new list (docs/operations.md).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from bench.api_rows import (
    READ,
    READ_TOKEN,
    WRITE,
    WRITE_TOKEN,
    alarm,
    make_settings,
    ood_window,
    register,
    store,
    trace,
)
from monitor.api import create_app
from monitor.api.auth import PUBLIC_PATHS, TokenScope, required_scope
from monitor.db.engine import make_engine, session_factory
from monitor.db.migrate import upgrade
from monitor.db.models import Base
from tests.support.databases import postgres_database

pytestmark = pytest.mark.postgres

LIMIT = 1_000_000  # make_settings' max_body_bytes
ALARM = alarm("bikes", 7)
VALID_PATH = {"name": "bikes", "alarm_id": ALARM.id, "delivery_id": "1"}

SQL_INJECTION = (
    "' OR '1'='1", "'; DROP TABLE alarms; --", "1; SELECT pg_sleep(600)--", '" OR ""="',
    "1 UNION SELECT NULL, version()--", "') OR ('1'='1", "admin'--", "$$; DELETE FROM streams; $$",
    "1' AND 1=CAST((SELECT current_user) AS int)--", "%27%20OR%201%3D1--",
)
PATH_TRAVERSAL = (
    "../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "....//....//etc/passwd", "..\\..\\windows\\win.ini", "/etc/passwd", "%252e%252e%252f",
    "bikes/../../alarms",
)
ODD = ("A" * 10_000, "ünïcödé ☃", "\r\nSet-Cookie: admin=1", "${jndi:ldap://x/a}", "{{7*7}}",
       "-1", "1e309", "[]", "{}")
PAYLOADS = SQL_INJECTION + PATH_TRAVERSAL + ODD


@pytest.fixture(scope="module")
def database(postgres_admin: Engine) -> Iterator[str]:
    with postgres_database(postgres_admin) as url:
        upgrade(url)
        engine = make_engine(url)
        with session_factory(engine)() as session:
            register(session, "bikes")
            store(session, alarms=[ALARM, alarm("bikes", 8)],
                  trace_points=trace("bikes", "conditional", range(0, 50, 10)),
                  ood_windows=[ood_window("bikes", 0, ("e-1",))])
        engine.dispose()
        yield url


@pytest.fixture(scope="module")
def app(database: str) -> FastAPI:
    return create_app(make_settings(database))


@pytest.fixture(scope="module")
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def row_counts(url: str) -> dict[str, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                    for t in Base.metadata.sorted_tables}
    finally:
        engine.dispose()


def operations() -> list[tuple[str, str, list[tuple[str, str]]]]:
    """(method, path template, [(parameter, 'path' | 'query')]) of every protected operation."""
    schema = create_app(make_settings("sqlite://")).openapi()
    out = []
    for path, methods in sorted(schema["paths"].items()):
        if path in PUBLIC_PATHS:
            continue
        for method, op in sorted(methods.items()):
            params = [(p["name"], p["in"]) for p in op.get("parameters", [])]
            out.append((method.upper(), path, params))
    return out


OPERATIONS = operations()
PROTECTED = [(m, p) for m, p, _ in OPERATIONS]
PARAMETERS = [(m, p, name, where) for m, p, params in OPERATIONS for name, where in params]


def url_for(path: str, override: dict[str, str] | None = None) -> str:
    values = {k: quote(v, safe="") for k, v in (VALID_PATH | (override or {})).items()}
    return path.format(**values)


def test_every_route_and_parameter_is_covered() -> None:
    assert len(PROTECTED) == 18
    assert {p for _, _, p, _ in PARAMETERS} >= {
        "name", "alarm_id", "stream", "kind", "detector", "since", "until", "acknowledged",
        "limit", "cursor", "max_points", "status", "receiver", "delivery_id", "fleet"}


# -- tokens ----------------------------------------------------------------------------------------

FORGED: dict[str, str | bytes] = {
    "64k-token": "Bearer " + "t" * 65_536,
    "latin-1": ("Bearer \xfc" + WRITE_TOKEN).encode("latin-1"),
    "prefix": "Bearer " + WRITE_TOKEN[:-1],
    "case-changed": "Bearer " + WRITE_TOKEN.upper(),
    "digest-as-token": "Bearer sha256:" + hashlib.sha256(WRITE_TOKEN.encode()).hexdigest(),
    "hex-digest": "Bearer " + hashlib.sha256(WRITE_TOKEN.encode()).hexdigest(),
    "token-scheme": "Token " + WRITE_TOKEN,
    "two-tokens": f"Bearer {READ_TOKEN} {WRITE_TOKEN}",
    "sql": "Bearer ' OR '1'='1",
}


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
@pytest.mark.parametrize("forged", list(FORGED))
def test_forged_tokens_are_401(client: TestClient, method: str, path: str, forged: str) -> None:
    response = client.request(method, url_for(path), headers={"Authorization": FORGED[forged]},
                              json=[{}])
    assert response.status_code == 401, response.text
    assert WRITE_TOKEN not in response.text and READ_TOKEN not in response.text


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
def test_tokens_outside_the_authorization_header_are_ignored(
    client: TestClient, method: str, path: str
) -> None:
    url = url_for(path) + f"?access_token={WRITE_TOKEN}&token={WRITE_TOKEN}"
    response = client.request(method, url, json=[{}],
                              headers={"Cookie": f"token={WRITE_TOKEN}",
                                       "X-Api-Key": WRITE_TOKEN})
    assert response.status_code == 401


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=[f"{m} {p}" for m, p in PROTECTED])
def test_wrong_scope_is_403_and_changes_nothing(
    client: TestClient, database: str, method: str, path: str
) -> None:
    if required_scope(method) is TokenScope.READ:
        assert client.request(method, url_for(path), headers=READ).status_code in (200, 404)
        return
    before = row_counts(database)
    response = client.request(method, url_for(path), headers=READ, json=[{}])
    assert response.status_code == 403
    assert row_counts(database) == before


# -- injection and traversal -----------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "name", "where"), PARAMETERS,
                         ids=[f"{m} {p} {n}" for m, p, n, _ in PARAMETERS])
def test_injection_and_traversal_in_every_parameter_is_4xx(
    client: TestClient, database: str, method: str, path: str, name: str, where: str
) -> None:
    before = row_counts(database)
    started = time.monotonic()
    statuses: dict[str, int] = {}
    for payload in PAYLOADS:
        if where == "path":
            response = client.request(method, url_for(path, {name: payload}), headers=WRITE)
        else:
            response = client.request(method, url_for(path), params={name: payload},
                                      headers=WRITE)
        statuses[payload[:40]] = response.status_code
    hostile = {p[:40] for p in SQL_INJECTION + PATH_TRAVERSAL}
    assert all(400 <= s < 500 for p, s in statuses.items() if p in hostile), statuses
    # Odd but possibly valid values ("1e309" is a valid stream name): never a 5xx.
    assert all(s < 500 for s in statuses.values()), statuses
    # An injected pg_sleep(600) that ran would hold its request for ten minutes: a bound far
    # from any speed of the shared machine (no request waits on the database that long).
    assert time.monotonic() - started < 300, "an injected pg_sleep must never run"
    assert row_counts(database) == before


@pytest.mark.parametrize("raw", ["/streams/../../etc/passwd", "/alarms/..%2f..%2fetc%2fpasswd",
                                 "/streams/bikes/../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                                 "//etc/passwd", "/streams/bikes/trace/../../alarms/x/ack"])
def test_raw_traversal_urls_are_4xx(client: TestClient, raw: str) -> None:
    for headers in ({}, READ, WRITE):
        for method in ("GET", "POST"):
            response = client.request(method, raw, headers=headers)
            assert 400 <= response.status_code < 500, (method, raw, response.status_code)
            assert "root:" not in response.text


def test_injection_in_body_text_is_stored_verbatim(client: TestClient, database: str) -> None:
    before = row_counts(database)
    by = "x'); DROP TABLE alarms; --"
    response = client.post(f"/alarms/{ALARM.id}/ack", json={"by": by}, headers=WRITE)
    assert response.status_code == 200
    assert client.get(f"/alarms/{ALARM.id}", headers=READ).json()["acknowledged_by"] == by
    response = client.post("/streams", headers=WRITE, json={
        "name": "x'; DROP TABLE streams;--", "task": "regression", "calibration": []})
    assert response.status_code == 422
    assert row_counts(database) == before


@pytest.mark.parametrize("case", ["get-alarm", "ack-path", "ack-by", "calibration-id"])
def test_nul_characters_are_4xx(client: TestClient, case: str) -> None:
    cal = [{"features": [1.0 + i, 2.0], "prediction": 1.0 + i, "label": 1.5 + i, "id": "r\x00"}
           for i in range(20)]
    response = {
        "get-alarm": lambda: client.get("/alarms/a%00b", headers=READ),
        "ack-path": lambda: client.post(f"/alarms/{ALARM.id}%00/ack", headers=WRITE),
        "ack-by": lambda: client.post(f"/alarms/{ALARM.id}/ack", json={"by": "a\x00"},
                                      headers=WRITE),
        "calibration-id": lambda: client.post("/streams", headers=WRITE, json={
            "name": "nul", "task": "regression", "calibration": cal}),
    }[case]()
    assert 400 <= response.status_code < 500, response.text


# -- bodies ----------------------------------------------------------------------------------------

WRITES = [(m, p) for m, p in PROTECTED if required_scope(m) is TokenScope.WRITE]


def _chunks(total: int) -> Iterator[bytes]:
    for _ in range(total // 65_536 + 1):
        yield b" " * 65_536


@pytest.mark.parametrize(("method", "path"), WRITES, ids=[f"{m} {p}" for m, p in WRITES])
@pytest.mark.parametrize("body", [
    "declared", "chunked", "deep-nesting", "not-utf8", "10001-items", "wrong-type"])
def test_hostile_bodies_are_4xx(client: TestClient, database: str, method: str, path: str,
                                body: str) -> None:
    content = {
        "declared": b"[" + b" " * (4 * LIMIT) + b"]",
        "chunked": _chunks(LIMIT + 1),
        "deep-nesting": b"[" * 200_000 + b"]" * 200_000,
        "not-utf8": b'[{"kind": "\xff\xfe"}]',
        "10001-items": b"[" + b",".join([b"{}"] * 10_001) + b"]",
        "wrong-type": b'"a string"',
    }[body]
    before = row_counts(database)
    response = client.request(method, url_for(path), content=content,
                              headers=WRITE | {"Content-Type": "application/json"})
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:200])
    if body in ("declared", "chunked"):
        assert response.status_code == 413
    assert row_counts(database) == before


def test_nan_in_an_event_batch_is_a_dead_letter(client: TestClient) -> None:
    # Python's JSON parser reads NaN; the item is dead-lettered, the request accepted.
    response = client.post("/events", headers=WRITE | {"Content-Type": "application/json"},
                           content=b'[{"kind": "label", "stream": "bikes", "id": "e", '
                                   b'"label": NaN}]')
    assert response.status_code == 202
    assert response.json()["dead_letters"][0]["reason"].startswith("NaN is not allowed")


@pytest.mark.parametrize(("path", "body"), [
    (f"/alarms/{ALARM.id}/ack", b'{"by": NaN}'),
    ("/streams", b'{"name": "n", "task": "regression", "calibration": [], "seed": Infinity}'),
], ids=["ack", "streams"])
def test_nan_in_a_rejected_body_is_422(client: TestClient, path: str, body: bytes) -> None:
    response = client.post(path, content=body,
                           headers=WRITE | {"Content-Type": "application/json"})
    assert response.status_code == 422, response.text


def test_a_malformed_authorization_header_is_not_echoed(client: TestClient) -> None:
    response = client.get("/alarms", headers={"Authorization": "Bearer" + WRITE_TOKEN})
    assert response.status_code == 401
    assert WRITE_TOKEN not in response.text
