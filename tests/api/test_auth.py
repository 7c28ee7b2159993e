"""Authentication: tokens, scopes, and a 401/403 check of every route the app serves."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from bench.api_rows import READ, WRITE, WRITE_TOKEN, make_settings
from monitor.api import create_app
from monitor.api.auth import PUBLIC_PATHS, TokenScope, TokenStore, required_scope

#: Path parameters used to call every route (the resources need not exist: auth comes first).
PATH_VALUES = {
    "name": "bikes", "alarm_id": "0b1e7a3c-5f7e-5d41-9a43-3d2f1c0e9b77", "delivery_id": "1"
}


def _routes() -> list[tuple[str, str]]:
    """(method, path) of every route of a freshly built app, included routers walked through."""
    app = create_app(make_settings("sqlite://"))
    out: list[tuple[str, str]] = []
    for route in iter_route_contexts(app.routes):
        path = str(route.path)
        if path not in PUBLIC_PATHS or isinstance(route.original_route, APIRoute):
            out += [(method, path) for method in sorted(route.methods or ())]
    return sorted(out)


ROUTES = _routes()
PROTECTED = [(m, p) for m, p in ROUTES if p not in PUBLIC_PATHS]
WRITE_ROUTES = [(m, p) for m, p in PROTECTED if required_scope(m) is TokenScope.WRITE]
READ_ROUTES = [(m, p) for m, p in PROTECTED if required_scope(m) is TokenScope.READ]


def _url(path: str) -> str:
    return path.format(**PATH_VALUES)


def _ids(routes: list[tuple[str, str]]) -> list[str]:
    return [f"{m} {p}" for m, p in routes]


def test_the_app_serves_the_documented_routes() -> None:
    # A new route must be added here on purpose; the parametrized checks below then cover it.
    assert (
        sorted(
            [
                ("GET", "/health"),
                ("GET", "/login"),
                ("POST", "/login"),
                ("GET", "/logout"),
                ("POST", "/logout"),
                ("GET", "/metrics"),
                ("GET", "/streams"),
                ("POST", "/streams"),
                ("GET", "/streams/{name}"),
                ("PUT", "/streams/{name}"),
                ("GET", "/streams/{name}/trace"),
                ("GET", "/streams/{name}/ood"),
                ("GET", "/streams/{name}/performance"),
                ("GET", "/alarms"),
                ("GET", "/alarms/{alarm_id}"),
                ("GET", "/alarms/{alarm_id}/report"),
                ("POST", "/alarms/{alarm_id}/ack"),
                ("GET", "/alerts/deliveries"),
                ("POST", "/alerts/deliveries/{delivery_id}/retry"),
                ("POST", "/events"),
                ("GET", "/fleets"),
                ("POST", "/fleets"),
                ("GET", "/fleets/{name}"),
            ]
        )
        == ROUTES
    )


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=_ids(PROTECTED))
def test_missing_token_is_401_with_challenge(client: TestClient, method: str, path: str) -> None:
    response = client.request(method, _url(path), json=[{}])
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="monitor"'
    assert "missing bearer token" in response.json()["detail"]


@pytest.mark.parametrize(("method", "path"), PROTECTED, ids=_ids(PROTECTED))
@pytest.mark.parametrize(
    "header",
    ["Bearer not-a-token", f"Bearer {WRITE_TOKEN}x", f"Basic {WRITE_TOKEN}", "Bearer "],
    ids=["unknown", "suffixed", "basic-scheme", "empty"],
)
def test_invalid_token_is_401(client: TestClient, method: str, path: str, header: str) -> None:
    response = client.request(method, _url(path), headers={"Authorization": header}, json=[{}])
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


@pytest.mark.parametrize(("method", "path"), WRITE_ROUTES, ids=_ids(WRITE_ROUTES))
def test_read_token_on_write_route_is_403(client: TestClient, method: str, path: str) -> None:
    response = client.request(method, _url(path), headers=READ, json=[{}])
    assert response.status_code == 403
    assert 'error="insufficient_scope"' in response.headers["www-authenticate"]
    assert "'write' scope" in response.json()["detail"]


@pytest.mark.parametrize(("method", "path"), READ_ROUTES, ids=_ids(READ_ROUTES))
@pytest.mark.parametrize("headers", [READ, WRITE], ids=["read", "write"])
def test_read_routes_accept_read_and_write_tokens(
    client: TestClient, method: str, path: str, headers: dict[str, str]
) -> None:
    assert client.request(method, _url(path), headers=headers).status_code in (200, 404)


def test_unauthenticated_large_body_is_401_not_413(client: TestClient) -> None:
    # Authentication runs before the body is read: nothing leaks to anonymous clients.
    response = client.post("/events", content=b"x" * 2_000_000)
    assert response.status_code == 401


def test_unauthenticated_malformed_body_is_401_not_422(client: TestClient) -> None:
    response = client.post(
        "/events", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 401


@pytest.mark.parametrize("path", ["/health", "/openapi.json", "/docs", "/favicon.ico", "/login"])
def test_public_paths_need_no_token(client: TestClient, path: str) -> None:
    assert client.get(path).status_code == 200


def test_unknown_paths_need_a_token_before_404(client: TestClient) -> None:
    assert client.get("/nope").status_code == 401
    assert client.get("/nope", headers=READ).status_code == 404


# --- TokenStore -------------------------------------------------------------------------------


def test_token_store_keeps_only_digests() -> None:
    store = TokenStore.from_setting("read:alpha-secret, write:beta-secret")
    kept = repr(vars(store)) + repr(store._entries)
    assert "alpha-secret" not in kept and "beta-secret" not in kept
    assert store.authenticate("alpha-secret").scope is TokenScope.READ  # type: ignore[union-attr]
    assert store.authenticate("beta-secret").scope is TokenScope.WRITE  # type: ignore[union-attr]
    assert store.authenticate("alpha-secre") is None


def test_token_given_as_its_digest() -> None:
    digest = hashlib.sha256(b"from-vault").hexdigest()
    store = TokenStore.from_setting(f"write:sha256:{digest}")
    assert store.authenticate("from-vault").scope is TokenScope.WRITE  # type: ignore[union-attr]
    assert store.authenticate(f"sha256:{digest}") is None


def test_write_implies_read_and_duplicates_take_the_wider_scope() -> None:
    store = TokenStore.from_setting("read:same,write:same")
    principal = store.authenticate("same")
    assert principal is not None and principal.scope is TokenScope.WRITE
    assert principal.can(TokenScope.READ) and principal.can(TokenScope.WRITE)
    assert principal.token_id == hashlib.sha256(b"same").hexdigest()[:12]


def test_every_digest_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    store = TokenStore.from_setting("read:a1,read:b2,write:c3,write:d4")
    calls: list[int] = []
    compare = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append(1)
        return compare(a, b)

    monkeypatch.setattr("monitor.api.auth.hmac.compare_digest", counting)
    for token in ("a1", "d4", "zz"):
        calls.clear()
        store.authenticate(token)
        assert len(calls) == 4, token


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("admin:x", "unknown API token scope 'admin'; valid scopes: read, write"),
        ("justatoken", "needs a scope"),
        ("read:", "empty token"),
    ],
)
def test_malformed_token_setting_is_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TokenStore.from_setting(spec)


def test_malformed_token_setting_stops_the_app_factory() -> None:
    with pytest.raises(ValueError, match="valid scopes"):
        create_app(make_settings("sqlite://", api_tokens="root:x"))


def test_no_tokens_configured_locks_every_protected_route(database_url: str) -> None:
    with TestClient(create_app(make_settings(database_url, api_tokens=""))) as client:
        assert client.get("/alarms", headers=READ).status_code == 401
        assert client.get("/health").status_code == 200
