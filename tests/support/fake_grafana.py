"""A small Grafana HTTP API on loopback that checks the request shapes grafana-client sends.

No Grafana binary is available on the machines that run these tests, so this real
``http.server`` implements the endpoints that :func:`monitor.ops.dashboards.push_dashboards` calls,
with the status codes and the validation Grafana applies (documented in Grafana's HTTP API
reference: folders, data sources, dashboards):

``GET /api/folders/{uid}`` (404 when missing), ``POST /api/folders`` (``title`` required),
``GET /api/datasources/uid/{uid}`` (404 when missing), ``POST /api/datasources`` (``name``,
``type``, ``access``; 409 on a duplicate name or uid), ``PUT /api/datasources/uid/{uid}``,
``POST /api/dashboards/db`` (``dashboard`` object with ``uid`` and ``title``; 412
``version-mismatch`` when the uid exists and ``overwrite`` is not true; 400 when the folder does
not exist).

Every endpoint needs ``Authorization: Bearer <token>`` or basic auth with the configured
credentials (401 otherwise, like Grafana). Bodies that Grafana would reject, or that this project
must never send (a PostgreSQL datasource without a database or with a password outside
``secureJsonData``), are answered with 400 and recorded in :attr:`FakeGrafana.problems`.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POSTGRES_TYPES = {"grafana-postgresql-datasource", "postgres"}


@dataclass
class Request:
    method: str
    path: str
    body: Any
    authorization: str | None


@dataclass
class FakeGrafana:
    """State of the fake Grafana: folders, datasources and dashboards by uid."""

    token: str = "glsa_test_token"
    user: str = "admin"
    password: str = "admin-password"
    folders: dict[str, dict[str, Any]] = field(default_factory=dict)
    datasources: dict[str, dict[str, Any]] = field(default_factory=dict)
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def start(self) -> FakeGrafana:
        handler = type("Handler", (_Handler,), {"grafana": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def authorized(self, header: str | None) -> bool:
        if header == f"Bearer {self.token}":
            return True
        basic = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return header == f"Basic {basic}"

    # -- endpoints: each returns (status, JSON body) --------------------------------------------

    def get_folder(self, uid: str) -> tuple[int, Any]:
        if uid not in self.folders:
            return 404, {"message": "folder not found", "status": "not-found"}
        return 200, self.folders[uid]

    def create_folder(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not body.get("title"):
            return self.reject("POST /api/folders needs a title")
        uid = body.get("uid") or f"f{len(self.folders)}"
        if uid in self.folders:
            return 409, {"message": "a folder with the same uid already exists"}
        self.folders[uid] = {"id": len(self.folders) + 1, "uid": uid, "title": body["title"]}
        return 200, self.folders[uid]

    def get_datasource(self, uid: str) -> tuple[int, Any]:
        if uid not in self.datasources:
            return 404, {"message": "Data source not found"}
        public = {k: v for k, v in self.datasources[uid].items() if k != "secureJsonData"}
        return 200, public

    def create_datasource(self, body: Any) -> tuple[int, Any]:
        problem = _datasource_problem(body)
        if problem:
            return self.reject(problem)
        if body.get("uid") in self.datasources:
            return 409, {"message": "data source with the same uid already exists"}
        if any(d["name"] == body["name"] for d in self.datasources.values()):
            return 409, {"message": "data source with the same name already exists"}
        uid = body.get("uid") or f"ds{len(self.datasources)}"
        stored = {**body, "uid": uid, "id": len(self.datasources) + 1, "version": 1}
        self.datasources[uid] = stored
        return 200, {"datasource": stored, "id": stored["id"], "message": "Datasource added"}

    def update_datasource(self, uid: str, body: Any) -> tuple[int, Any]:
        if uid not in self.datasources:
            return 404, {"message": "Data source not found"}
        problem = _datasource_problem(body)
        if problem:
            return self.reject(problem)
        old = self.datasources[uid]
        stored = {**body, "uid": uid, "id": old["id"], "version": old["version"] + 1}
        if "secureJsonData" not in body and "secureJsonData" in old:
            stored["secureJsonData"] = old["secureJsonData"]  # Grafana keeps stored secrets
        self.datasources[uid] = stored
        return 200, {"datasource": stored, "id": stored["id"], "message": "Datasource updated"}

    def save_dashboard(self, body: Any) -> tuple[int, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("dashboard"), dict):
            return self.reject("POST /api/dashboards/db needs a dashboard object")
        dashboard = body["dashboard"]
        if not dashboard.get("uid") or not dashboard.get("title"):
            return self.reject("dashboard needs a uid and a title")
        if dashboard.get("id") is not None:
            return self.reject("dashboard id must be null: dashboards are matched by uid")
        folder = body.get("folderUid")
        if folder and folder not in self.folders:
            return 400, {"message": "folder not found", "status": "folder-not-found"}
        uid = dashboard["uid"]
        if uid in self.dashboards and body.get("overwrite") is not True:
            return 412, {
                "message": "The dashboard has been changed by someone else",
                "status": "version-mismatch",
            }
        version = self.dashboards[uid]["version"] + 1 if uid in self.dashboards else 1
        self.dashboards[uid] = {
            "dashboard": dashboard,
            "folderUid": folder,
            "version": version,
            "message": body.get("message"),
        }
        return 200, {
            "id": len(self.dashboards),
            "uid": uid,
            "status": "success",
            "url": f"/d/{uid}/{dashboard['title'].lower().replace(' ', '-')}",
            "version": version,
        }

    def reject(self, problem: str) -> tuple[int, Any]:
        self.problems.append(problem)
        return 400, {"message": problem}


def _datasource_problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "datasource body must be a JSON object"
    for key in ("name", "type", "access"):
        if not body.get(key):
            return f"datasource needs {key!r}"
    if body["access"] not in {"proxy", "direct"}:
        return "datasource access must be proxy or direct"
    if body["type"] in POSTGRES_TYPES:
        if not body.get("url") or ":" not in body["url"]:
            return "PostgreSQL datasource needs url host:port"
        if not body.get("jsonData", {}).get("database"):
            return "PostgreSQL datasource needs jsonData.database"
        if "password" in body or "password" in body.get("jsonData", {}):
            return "the password belongs in secureJsonData"
    if body["type"] == "prometheus" and not str(body.get("url", "")).startswith("http"):
        return "Prometheus datasource needs an http(s) url"
    return None


class _Handler(BaseHTTPRequestHandler):
    grafana: FakeGrafana

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def _dispatch(self, method: str) -> None:
        body = self._body()
        auth = self.headers.get("Authorization")
        self.grafana.requests.append(Request(method, self.path, body, auth))
        if body is _INVALID:
            self._send(400, {"message": "bad request data"})
        elif not self.grafana.authorized(auth):
            self._send(401, {"message": "invalid API key"})
        else:
            self._send(*self._route(method, self.path, body))

    def _route(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        g = self.grafana
        parts = path.split("?")[0].strip("/").split("/")
        match method, parts:
            case "GET", ["api", "folders", uid]:
                return g.get_folder(uid)
            case "POST", ["api", "folders"]:
                return g.create_folder(body)
            case "GET", ["api", "datasources", "uid", uid]:
                return g.get_datasource(uid)
            case "POST", ["api", "datasources"]:
                return g.create_datasource(body)
            case "PUT", ["api", "datasources", "uid", uid]:
                return g.update_datasource(uid, body)
            case "POST", ["api", "dashboards", "db"]:
                return g.save_dashboard(body)
        return 404, {"message": "Not found"}

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return None
        if "application/json" not in (self.headers.get("Content-Type") or ""):
            return _INVALID
        try:
            return json.loads(self.rfile.read(length))
        except json.JSONDecodeError:
            return _INVALID

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


_INVALID = object()
