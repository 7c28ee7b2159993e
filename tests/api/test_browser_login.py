"""The browser login: ``/login`` sets a signed, expiring session cookie that authenticates
reads only; ``/logout``; the local-only ``next`` redirect; and the session signer itself."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from bench.api_rows import READ_TOKEN, WRITE, WRITE_TOKEN, make_settings
from monitor.api import create_app
from monitor.api.app import session_key
from monitor.api.auth import SESSION_COOKIE, Principal, TokenStore
from monitor.api.sessions import SessionSigner, safe_next

SECRET = "a-session-secret-of-32-characters"
ALARM = "0b1e7a3c-5f7e-5d41-9a43-3d2f1c0e9b77"
HTML = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


@pytest.fixture(scope="module")
def app(database_url: str) -> FastAPI:
    return create_app(make_settings(database_url, session_secret=SECRET))


@pytest.fixture
def browser(app: FastAPI) -> Iterator[TestClient]:
    """A fresh client (an empty cookie jar) that does not follow redirects."""
    with TestClient(app, follow_redirects=False) as client:
        yield client


def _login(client: TestClient, token: str = READ_TOKEN, next: str = "/alarms") -> str:
    response = client.post("/login", data={"token": token, "next": next})
    assert response.status_code == 303, response.text
    return str(response.headers["set-cookie"])


def _signer(tokens: str, now: float, hours: float = 12) -> SessionSigner:
    key = session_key(make_settings("sqlite://", session_secret=SECRET))
    return SessionSigner(key, TokenStore.from_setting(tokens), round(hours * 3600), lambda: now)


def test_login_page_is_a_form_without_script(browser: TestClient) -> None:
    response = browser.get("/login", params={"next": '/alarms?x="><b>'})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert '<form method="post" action="login">' in page and 'name="token"' in page
    assert "<script" not in page and "http" not in page.replace("http-equiv", "")
    assert 'value="/alarms?x=&quot;&gt;&lt;b&gt;"' in page  # next, escaped


def test_login_sets_a_signed_http_only_lax_cookie(browser: TestClient) -> None:
    response = browser.post("/login", data={"token": READ_TOKEN, "next": "/alarms?limit=5"})
    assert response.status_code == 303
    assert response.headers["location"] == "/alarms?limit=5"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    attributes = {a.strip().split("=")[0].lower(): a for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite", "max-age", "path"} <= set(attributes)
    assert attributes["samesite"].strip().lower() == "samesite=lax"
    assert attributes["max-age"].strip() == "Max-Age=43200"  # MONITOR_SESSION_HOURS: 12
    assert "secure" not in attributes  # plain HTTP here; set on HTTPS
    assert READ_TOKEN not in cookie


def test_session_cookie_authenticates_reads(browser: TestClient) -> None:
    assert browser.get("/alarms").status_code == 401
    _login(browser)
    assert browser.get("/alarms").status_code == 200
    assert browser.head("/alarms").status_code == 405  # authenticated; FastAPI has no HEAD
    assert browser.get(f"/alarms/{ALARM}/report").status_code == 404  # through auth, no alarm


@pytest.mark.parametrize(
    ("path", "body"),
    [(f"/alarms/{ALARM}/ack", {"note": "x"}), ("/events", []), ("/streams", {})],
    ids=["ack", "events", "streams"],
)
def test_session_cookie_is_refused_on_writes(browser: TestClient, path: str,
                                             body: object) -> None:
    _login(browser, token=WRITE_TOKEN)  # even a write token's session cannot write
    response = browser.post(path, json=body)
    assert response.status_code == 401
    assert "GET, HEAD and OPTIONS only" in response.json()["detail"]
    # the same request with the header goes through authentication
    assert browser.post(path, json=body, headers=WRITE).status_code != 401


def test_wrong_token_is_refused_without_a_cookie(browser: TestClient) -> None:
    response = browser.post("/login", data={"token": "not-a-token", "next": "/alarms"})
    assert response.status_code == 401
    assert "set-cookie" not in response.headers
    assert "That token is not valid" in response.text
    assert browser.get("/alarms").status_code == 401


def test_expired_session_is_refused(browser: TestClient) -> None:
    tokens = make_settings("sqlite://").api_tokens
    # issued 13 hours ago, lasting 12: expired an hour ago
    stale = _signer(tokens, now=time.time() - 13 * 3600).issue(_principal(tokens))
    fresh = _signer(tokens, now=time.time() - 11 * 3600).issue(_principal(tokens))
    browser.cookies.set(SESSION_COOKIE, stale)
    assert browser.get("/alarms").status_code == 401
    browser.cookies.set(SESSION_COOKIE, fresh)
    assert browser.get("/alarms").status_code == 200


def test_tampered_session_is_refused(browser: TestClient) -> None:
    value = _login(browser).split(";")[0].split("=", 1)[1]
    browser.cookies.clear()  # only the cookies set below
    payload, signature = value.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    longer = base64.urlsafe_b64encode(
        json.dumps(body | {"e": body["e"] + 10**6}).encode()).rstrip(b"=").decode()
    forged_key = SessionSigner(b"another key of 32 bytes........", TokenStore.from_setting(
        make_settings("sqlite://").api_tokens), 3600).issue(_principal(
            make_settings("sqlite://").api_tokens))
    for bad in (f"{longer}.{signature}", f"{payload}.{signature[:-1]}A", forged_key,
                payload, "", "x.y.z"):
        browser.cookies.set(SESSION_COOKIE, bad)
        assert browser.get("/alarms").status_code == 401, bad
    browser.cookies.set(SESSION_COOKIE, value)
    assert browser.get("/alarms").status_code == 200


def test_session_ends_when_its_token_is_removed(database_url: str) -> None:
    with TestClient(create_app(make_settings(database_url, session_secret=SECRET)),
                    follow_redirects=False) as before:
        cookie = _login(before).split(";")[0].split("=", 1)[1]
    rotated = make_settings(database_url, session_secret=SECRET, api_tokens=f"write:{WRITE_TOKEN}")
    with TestClient(create_app(rotated), follow_redirects=False) as after:
        after.cookies.set(SESSION_COOKIE, cookie)
        assert after.get("/alarms").status_code == 401


@pytest.mark.parametrize(
    "target",
    ["//evil.example/x", "https://evil.example/", "/\\evil.example", "\\\\evil.example",
     "javascript:alert(1)", "http:evil.example", "/ok\r\nSet-Cookie: x=1", "evil.example", ""],
    ids=["scheme-relative", "absolute", "backslash", "unc", "javascript", "scheme-only",
         "header-injection", "relative", "empty"],
)
def test_login_never_redirects_off_site(browser: TestClient, target: str) -> None:
    response = browser.post("/login", data={"token": READ_TOKEN, "next": target})
    assert response.status_code == 303
    assert response.headers["location"] == "/docs"


def test_safe_next_keeps_local_paths_with_queries() -> None:
    assert safe_next("/alarms/a-1/report?x=1&y=%2F%2F") == "/alarms/a-1/report?x=1&y=%2F%2F"
    assert safe_next(None) == "/docs"


def test_browser_page_request_is_sent_to_login(browser: TestClient) -> None:
    response = browser.get(f"/alarms/{ALARM}/report", params={"v": "1"}, headers=HTML)
    assert response.status_code == 303
    assert response.headers["location"] == f"/login?next=%2Falarms%2F{ALARM}%2Freport%3Fv%3D1"
    # an API client (no text/html) keeps its 401 and challenge
    assert browser.get(f"/alarms/{ALARM}/report").status_code == 401


def test_logout_clears_the_cookie(browser: TestClient) -> None:
    _login(browser)
    response = browser.get("/logout")
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert 'monitor_session=""' in response.headers["set-cookie"]
    assert "Max-Age=0" in response.headers["set-cookie"]
    assert browser.get("/alarms").status_code == 401


def test_short_session_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 16 characters"):
        create_app(make_settings("sqlite://", session_secret="short"))


def test_session_hours_set_the_lifetime(database_url: str) -> None:
    settings = make_settings(database_url, session_secret=SECRET, session_hours=0.5)
    with TestClient(create_app(settings), follow_redirects=False) as client:
        assert "Max-Age=1800" in _login(client)


def test_signer_checks_expiry_against_its_clock() -> None:
    tokens = "read:abc"
    value = _signer(tokens, now=1_000_000.0, hours=1).issue(_principal(tokens))
    assert _signer(tokens, now=1_000_000.0 + 3599).verify(value) is not None
    assert _signer(tokens, now=1_000_000.0 + 3600).verify(value) is None


def test_signer_narrows_a_session_to_its_tokens_scope_today() -> None:
    value = _signer("write:abc", now=0.0).issue(_principal("write:abc"))
    principal = _signer("read:abc", now=0.0).verify(value)
    assert principal is not None and principal.scope.value == "read"


def _principal(tokens: str) -> Principal:
    store = TokenStore.from_setting(tokens)
    token = tokens.split(",")[0].split(":", 1)[1]
    principal = store.authenticate(token)
    assert principal is not None
    return principal
