"""``/login`` and ``/logout``: a browser session from an API token pasted once.

``POST /login`` takes the form fields ``token`` and ``next``; a valid token sets the session
cookie (:mod:`monitor.api.sessions`) and redirects to ``next`` when it is a path on this server.
Both paths are public; the pages have no script and load nothing.
"""

from __future__ import annotations

import html
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from monitor.api.auth import SESSION_COOKIE
from monitor.api.deps import ContextDep
from monitor.api.sessions import safe_next

router = APIRouter(include_in_schema=False)

Next = Annotated[str | None, Query(max_length=2048)]


@router.get("/login")
async def login_page(context: ContextDep, next: Next = None) -> HTMLResponse:
    return HTMLResponse(_page(safe_next(next), context.settings.dev))


@router.post("/login")
async def login(request: Request, context: ContextDep) -> Response:
    form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=8)
    token = (form.get("token") or [""])[0].strip()
    target = safe_next((form.get("next") or [""])[0])
    principal = context.tokens.authenticate(token) if token else None
    if principal is None:
        page = _page(target, context.settings.dev, "That token is not valid: paste a token "
                     "from MONITOR_API_TOKENS.")
        return HTMLResponse(page, status_code=401)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        context.signer.issue(principal),
        max_age=context.signer.max_age,
        path=request.scope.get("root_path") or "/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="lax",
    )
    return response


@router.get("/logout")
@router.post("/logout")
async def logout(request: Request) -> Response:
    root = request.scope.get("root_path") or ""
    response = RedirectResponse(f"{root}/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=root or "/", httponly=True, samesite="lax")
    return response


_CSS = (
    "body{font:15px/1.45 system-ui,sans-serif;max-width:34em;margin:4em auto;padding:0 1em;"
    "color:#1b1b1b}input[type=password]{width:100%;padding:.4em;font:inherit;box-sizing:"
    "border-box}button{margin-top:.8em;padding:.4em 1.2em;font:inherit}.error{color:#b3261e}"
    ".dev{background:#b36b00;color:#fff;padding:.4em .8em}"
)


def _page(target: str, dev: bool, error: str = "") -> str:
    notice = f'<p class="error" role="alert">{html.escape(error)}</p>' if error else ""
    banner = ('<p class="dev">Development mode: no token is needed; never expose this '
              "server.</p>") if dev else ""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>monitor: log in</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{banner}"
        "<h1>monitor</h1>\n<p>Paste an API token (<code>read</code> is enough) to open reports "
        "and the API's pages in this browser. The session lasts until it expires or you "
        "<a href=\"logout\">log out</a>; changes still need the token in an "
        "<code>Authorization</code> header.</p>\n"
        f"{notice}<form method=\"post\" action=\"login\">\n<label for=\"token\">API token</label>\n"
        "<input type=\"password\" id=\"token\" name=\"token\" autocomplete=\"current-password\" "
        "required autofocus>\n"
        f"<input type=\"hidden\" name=\"next\" value=\"{html.escape(target, quote=True)}\">\n"
        "<button type=\"submit\">Log in</button>\n</form>\n</body>\n</html>\n"
    )
