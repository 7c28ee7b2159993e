"""``/docs`` works offline: Swagger UI's page and files come from this server, none from a CDN."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from bench.api_rows import READ


def test_docs_page_loads_only_local_assets(client: TestClient) -> None:
    response = client.get("/docs")
    assert response.status_code == 200
    page = response.text
    assert "cdn" not in page.lower() and "://" not in page
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sorted(assets) == [
        "/docs/assets/favicon-32x32.png",
        "/docs/assets/swagger-ui-bundle.js",
        "/docs/assets/swagger-ui.css",
    ]
    assert '"validatorUrl": null' in page  # no call to the online validator
    for asset in assets:  # public, like the page
        served = client.get(asset)
        assert served.status_code == 200, asset
        assert len(served.content) > 500


def test_swagger_ui_is_version_5(client: TestClient) -> None:
    bundle = client.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert "SwaggerUIBundle" in bundle.text
    versions = set(re.findall(r'"(\d+)\.\d+\.\d+"', bundle.text))
    assert "5" in versions and "4" not in versions, versions


def test_other_static_paths_still_need_a_token(client: TestClient) -> None:
    assert client.get("/docsx").status_code == 401
    assert client.get("/redoc").status_code == 401  # not served: Swagger UI is the one page
    assert client.get("/redoc", headers=READ).status_code == 404
    assert client.get("/docs/oauth2-redirect").status_code == 200
