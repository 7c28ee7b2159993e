"""Structural checks of the dashboards JSON and the Grafana provisioning YAML (no Grafana)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from itertools import combinations
from typing import Any

import pytest
import yaml

from monitor.ops import dashboards as push
from tests.support.dashboards import (
    DASHBOARDS_DIR,
    METRICS,
    PROVISIONING,
    all_panels,
    imported,
    load_dashboards,
    provisioned_datasources,
    queries,
)
from tests.support.grafana_sql import MacroError, QueryContext, Variable, expand

#: schemaVersion written by Grafana 12.0–12.1 (the compose stack pins Grafana 12.2, which
#: migrates lower versions on load); bump together with the image in docker-compose.yml.
SCHEMA_VERSION = 41
PANEL_TYPES = {"stat", "timeseries", "table", "row", "barchart", "text"}

DASHBOARDS = load_dashboards()
IDS = [d["uid"] for d in DASHBOARDS]
DATASOURCES = provisioned_datasources()


def test_three_dashboards_with_stable_uids() -> None:
    assert IDS == ["monitor-fleet", "monitor-overview", "monitor-stream"]


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_dashboard_header(dashboard: dict[str, Any]) -> None:
    assert re.fullmatch(r"[a-z0-9-]{1,40}", dashboard["uid"])  # Grafana: at most 40 characters
    assert dashboard["title"] and dashboard["id"] is None
    assert dashboard["schemaVersion"] == SCHEMA_VERSION
    assert "monitor" in dashboard["tags"]


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_panel_ids_unique(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in all_panels(dashboard)]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_grid_positions_valid_and_disjoint(dashboard: dict[str, Any]) -> None:
    panels = list(all_panels(dashboard))
    for p in panels:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) and not isinstance(g[k], bool) for k in "xywh"), p["title"]
        assert g["x"] >= 0 and 1 <= g["w"] <= 24 and g["x"] + g["w"] <= 24, p["title"]
        assert g["y"] >= 0 and g["h"] >= 1, p["title"]
    for a, b in combinations(panels, 2):
        assert not _overlap(a["gridPos"], b["gridPos"]), f"{a['title']!r} overlaps {b['title']!r}"


def _overlap(a: dict[str, int], b: dict[str, int]) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


def test_overlap_detects_overlap() -> None:
    assert _overlap({"x": 0, "y": 0, "w": 12, "h": 8}, {"x": 11, "y": 7, "w": 4, "h": 4})
    assert not _overlap({"x": 0, "y": 0, "w": 12, "h": 8}, {"x": 12, "y": 0, "w": 12, "h": 8})


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_panels_have_titles_types_and_queries(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard):
        assert panel["type"] in PANEL_TYPES and panel["title"] and panel.get("description")
        if panel["type"] == "row":
            continue
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]


def _datasource_refs(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    refs = [(p["title"], p["datasource"]) for p in all_panels(dashboard) if "datasource" in p]
    refs += [(name, q["datasource"]) for name, q in queries(dashboard)]
    return refs


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_datasources_are_inputs(dashboard: dict[str, Any]) -> None:
    """Export-for-sharing form: every reference is ``${DS_...}`` of an input of the same plugin,
    so Grafana's UI import asks for each datasource; every input is used."""
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    used = set()
    for where, ref in _datasource_refs(dashboard):
        name = re.fullmatch(r"\$\{(DS_[A-Z_]+)\}", ref["uid"])
        assert name and name[1] in inputs, where  # never a hard-coded uid
        assert ref["type"] == inputs[name[1]]["pluginId"], where
        used.add(name[1])
    assert used == set(inputs)
    for name, entry in inputs.items():
        assert entry["type"] == "datasource" and entry["label"] and entry["description"]
        assert push.DATASOURCE_INPUTS[name][0] == entry["pluginId"]


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_imported_datasources_exist_in_provisioning(dashboard: dict[str, Any]) -> None:
    """Imported with the provisioned datasources chosen, every reference is one of theirs."""
    for where, ref in _datasource_refs(imported(dashboard)):
        assert ref["uid"] in DATASOURCES, where
        assert ref["type"] == DATASOURCES[ref["uid"]]["type"], where


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_each_input_is_a_datasource_variable(dashboard: dict[str, Any]) -> None:
    """Loaded unresolved from disk (file provisioning), ``${DS_...}`` is a datasource variable
    of the same name: it selects the provisioned datasource, hidden, before the variables whose
    queries use it."""
    variables = dashboard["templating"]["list"]
    kinds = [v["type"] for v in variables]
    assert kinds == sorted(kinds, key=lambda kind: kind != "datasource")
    by_name = {v["name"]: v for v in variables if v["type"] == "datasource"}
    assert set(by_name) == {i["name"] for i in dashboard["__inputs"]}
    for entry in dashboard["__inputs"]:
        var = by_name[entry["name"]]
        assert var["query"] == entry["pluginId"] and var["hide"] == 2
        provisioned = DATASOURCES[var["current"]["value"]]
        assert provisioned["type"] == entry["pluginId"]
        assert var["current"]["text"] == provisioned["name"]
        assert not var["multi"] and not var["includeAll"]


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_requires_lists_grafana_and_the_plugins(dashboard: dict[str, Any]) -> None:
    requires = {(r["type"], r["id"]) for r in dashboard["__requires"]}
    panels = {("panel", p["type"]) for p in all_panels(dashboard) if p["type"] != "row"}
    plugins = {("datasource", i["pluginId"]) for i in dashboard["__inputs"]}
    assert requires == {("grafana", "grafana")} | panels | plugins


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_every_target_has_a_query(dashboard: dict[str, Any]) -> None:
    for where, q in queries(dashboard):
        if q["datasource"]["type"] == push.POSTGRES_TYPE:
            assert q["rawSql"].strip() and q["rawQuery"] is True, where
            assert q["format"] in {"table", "time_series"}, where
        else:
            assert q["expr"].strip(), where


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_sql_formats_match_panel_types(dashboard: dict[str, Any]) -> None:
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            if "rawSql" not in target:
                continue
            expected = "time_series" if panel["type"] == "timeseries" else "table"
            assert target["format"] == expected, panel["title"]
            if expected == "time_series":
                assert re.search(r'AS "time"|\$__timeGroupAlias\(', target["rawSql"]), panel[
                    "title"
                ]
                assert "ORDER BY" in target["rawSql"], panel["title"]  # Grafana needs sorted time


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_sql_uses_only_supported_macros(dashboard: dict[str, Any]) -> None:
    ctx = QueryContext(
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 2, tzinfo=UTC),
        "1m",
        {
            var["name"]: Variable(("a",), multi=bool(var["multi"] or var["includeAll"]))
            for var in dashboard["templating"]["list"]
        },
    )
    for where, q in queries(dashboard):
        if "rawSql" in q:
            sql = expand(q["rawSql"], ctx)
            assert "$" not in sql, where
            assert "[[" not in sql, where


def test_expander_rejects_unknown_macro_and_missing_variable() -> None:
    ctx = QueryContext(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC))
    with pytest.raises(MacroError, match="unknown macro"):
        expand("SELECT $__nope(ts)", ctx)
    with pytest.raises(MacroError, match=r"\$stream"):
        expand("SELECT 1 WHERE s = '$stream'", ctx)


def test_expander_matches_grafana_output() -> None:
    # Expected strings follow Grafana's macros.go: RFC3339 bounds, epoch buckets, quoted values.
    ctx = QueryContext(
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 5, 0, 500000, tzinfo=UTC),
        "30s",
        {"s": Variable(("a", "o'k"), multi=True), "one": Variable(("x",))},
    )
    sql = expand(
        "$__timeGroupAlias(ts, $__interval) $__timeFilter(ts) s IN ($s) '$one' ${one}", ctx
    )
    assert sql == (
        'floor(extract(epoch from ts)/30)*30 AS "time" '
        "ts BETWEEN '2026-01-01T00:00:00Z' AND '2026-01-01T00:05:00.5Z' "
        "s IN ('a','o''k') 'x' x"
    )
    assert expand("$__timeGroup(ts, '500ms'), 1", ctx).startswith(
        "floor(extract(epoch from ts)/0.5)*0.5 AS"
    )


@pytest.mark.parametrize("dashboard", DASHBOARDS, ids=IDS)
def test_prometheus_queries_use_documented_metrics(dashboard: dict[str, Any]) -> None:
    for where, q in queries(dashboard):
        if "expr" in q:
            names = set(re.findall(r"\bmonitor_[a-z_]+", q["expr"]))
            assert names and names <= METRICS, where
            assert "$__rate_interval" in q["expr"] or "rate(" not in q["expr"], where


def test_documented_metrics_are_in_the_docs() -> None:
    text = (DASHBOARDS_DIR.parent / "docs" / "dashboards.md").read_text(encoding="utf-8")
    for name in METRICS:
        assert name in text


def test_stream_links_point_at_the_stream_dashboard() -> None:
    overview = next(d for d in DASHBOARDS if d["uid"] == "monitor-overview")
    urls = [
        link["url"]
        for panel in all_panels(overview)
        for override in panel["fieldConfig"]["overrides"]
        for prop in override["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]
    assert urls and all(u.startswith("/d/monitor-stream/") and "var-stream=" in u for u in urls)


def test_stream_dashboard_has_alarm_annotations_and_a_stream_variable() -> None:
    detail = next(d for d in DASHBOARDS if d["uid"] == "monitor-stream")
    names = [a["name"] for a in detail["annotations"]["list"]]
    assert names == ["Alarms", "Changepoints"]
    var, api_url = [v for v in detail["templating"]["list"] if v["type"] != "datasource"]
    assert var["name"] == "stream" and var["type"] == "query" and "FROM streams" in var["query"]
    assert (api_url["name"], api_url["type"]) == ("api_url", "textbox")
    assert api_url["query"] == api_url["current"]["value"] == "http://localhost:8000"


def test_stream_alarms_link_to_their_reports() -> None:
    detail = next(d for d in DASHBOARDS if d["uid"] == "monitor-stream")
    panel = next(p for p in all_panels(detail) if p["title"] == "Alarms of the stream")
    (override,) = [o for o in panel["fieldConfig"]["overrides"]
                   if any(prop["id"] == "links" for prop in o["properties"])]
    assert override["matcher"] == {"id": "byName", "options": "id"}
    (link,) = override["properties"][0]["value"]
    assert link["url"] == "${api_url}/alarms/${__data.fields.id}/report"
    # the field the link reads is a column of the panel's query
    assert re.search(r"^\s+id$", panel["targets"][0]["rawSql"], re.MULTILINE)


def test_provisioning_datasources_match_the_push_command() -> None:
    assert set(DATASOURCES) == {push.POSTGRES_UID, push.PROMETHEUS_UID}
    pg, prom = DATASOURCES[push.POSTGRES_UID], DATASOURCES[push.PROMETHEUS_UID]
    assert pg["type"] == push.POSTGRES_TYPE and prom["type"] == "prometheus"
    body = push.postgres_datasource("postgresql://u:p@h:5432/d")
    assert set(body["jsonData"]) <= set(pg["jsonData"])
    assert "password" in pg["secureJsonData"] and "password" not in pg.get("jsonData", {})
    assert pg["editable"] is True and prom["editable"] is True  # the push may update them


def test_provisioning_dashboards_provider() -> None:
    (path,) = (PROVISIONING / "dashboards").glob("*.yaml")
    (provider,) = yaml.safe_load(path.read_text(encoding="utf-8"))["providers"]
    assert provider["type"] == "file" and provider["folderUid"] == push.FOLDER_UID
    assert provider["allowUiUpdates"] is True  # so that the push can overwrite provisioned copies
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards/monitor"
