"""``/docs``: Swagger UI served from this server's own files, so it works offline.

FastAPI's default page loads Swagger UI from a CDN: behind a firewall or offline it is blank.
The static files come from the ``swagger-ui-bundle-v2`` package (Swagger UI 5, by the
maintainers of ``swagger-ui-bundle``, whose own releases stopped at Swagger UI 4), mounted at
``/docs/assets`` (public, like ``/docs``) as FastAPI's "Custom Docs UI Static Assets" recipe
describes. ``/redoc`` is not served: the bundle has no ReDoc, and Swagger UI shows the same
document.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

__all__ = ["ASSETS", "install_docs"]

#: Where the Swagger UI files are served.
ASSETS = "/docs/assets"


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs``, ``/docs/oauth2-redirect``, the Swagger UI files and ``/favicon.ico``
    on ``app`` (built with ``docs_url=None, redoc_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui")

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title}: API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon-32x32.png",
            oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
            # Swagger UI would otherwise ask an online validator about the document.
            swagger_ui_parameters={"validatorUrl": None},
        )

    async def oauth2_redirect(request: Request) -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def favicon(request: Request) -> FileResponse:
        # Browsers ask every server for one: without it each page logs a failed request.
        return FileResponse(swagger_ui_path / "favicon-32x32.png", media_type="image/png")

    app.add_route("/docs", swagger_ui, include_in_schema=False)
    app.add_route("/favicon.ico", favicon, include_in_schema=False)
    app.add_route("/docs/oauth2-redirect", oauth2_redirect, include_in_schema=False)
