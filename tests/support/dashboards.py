"""The dashboards of dashboards/*.json, their queries and the provisioned datasources."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS_DIR = ROOT / "dashboards"
PROVISIONING = DASHBOARDS_DIR / "provisioning"


def load_dashboards() -> list[dict[str, Any]]:
    return [
        json.loads(p.read_text(encoding="utf-8")) for p in sorted(DASHBOARDS_DIR.glob("*.json"))
    ]


#: What Grafana's import puts for each ``${DS_...}`` input of the files when the provisioned
#: datasources are chosen (and what ``monitor dashboards push`` must put), written out by hand.
IMPORTED_UIDS = {
    "${DS_MONITOR_POSTGRESQL}": "monitor-postgres",
    "${DS_PROMETHEUS}": "monitor-prometheus",
}


def imported(dashboard: dict[str, Any]) -> dict[str, Any]:
    """The dashboard as Grafana's import stores it: its inputs replaced in the JSON text, the
    keys only an import reads dropped."""
    text = json.dumps({k: v for k, v in dashboard.items() if not k.startswith("__")})
    for template, uid in IMPORTED_UIDS.items():
        text = text.replace(template, uid)
    result: dict[str, Any] = json.loads(text)
    return result


def provisioned_datasources() -> dict[str, dict[str, Any]]:
    """Datasources of dashboards/provisioning/datasources/*.yaml by uid."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted((PROVISIONING / "datasources").glob("*.yaml")):
        for ds in yaml.safe_load(path.read_text(encoding="utf-8"))["datasources"]:
            out[ds["uid"]] = ds
    return out


def all_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Panels of a dashboard, including those nested in collapsed rows."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every query of a dashboard with a readable id: panel targets, annotations, variables."""
    uid = dashboard["uid"]
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            yield f"{uid}/panel-{panel['id']}/{target['refId']}", target
    for anno in dashboard["annotations"]["list"]:
        if "target" in anno:
            yield (
                f"{uid}/annotation/{anno['name']}",
                anno["target"] | {"datasource": anno["datasource"]},
            )
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            yield (
                f"{uid}/variable/{var['name']}",
                {
                    "datasource": var["datasource"],
                    "rawSql": var["query"],
                    "format": "table",
                    "rawQuery": True,
                    "refId": var["name"],
                },
            )


#: Metrics of the API's /metrics that Prometheus-fed panels read (documented in docs/dashboards.md).
METRICS = {"monitor_events_processed_total", "monitor_label_join_lag_seconds"}
