"""Structural checks of docker-compose.yml and the Dockerfile.

Docker is not available on the machines that run these tests, so the stack itself is never
started here: these tests check what can be checked without it — the file parses, every
command of the monitor image is a real command of the package (parsed by the package's own
argument parsers), images are pinned, the start order is enforced by health checks and
``depends_on`` conditions, mounted files exist, and no credential is hard-coded.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from monitor.cli.main import _parser as monitor_parser
from monitor.ops import kafka_producer as replay

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_TEXT = (ROOT / "docker-compose.yml").read_text(encoding="utf-8")
_VAR = re.compile(r"\$\$|\$\{(\w+)(?:(:?-)([^}]*))?\}|\$(\w+)")


def interpolate(text: str, env: dict[str, str] | None = None) -> str:
    """Compose's variable interpolation: ``${VAR:-default}``, ``${VAR-default}``, ``$$`` escapes."""
    env = env or {}

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        if name in env:
            return env[name]
        if m.group(2) is None:
            raise AssertionError(
                f"${{{name}}} has no default: `docker compose up` would need it set"
            )
        return m.group(3)

    return _VAR.sub(sub, text)


def interpolate_tree(node: Any) -> Any:
    """Interpolate every string of the parsed file, as compose does (after YAML parsing)."""
    if isinstance(node, str):
        return interpolate(node)
    if isinstance(node, list):
        return [interpolate_tree(v) for v in node]
    if isinstance(node, dict):
        return {k: interpolate_tree(v) for k, v in node.items()}
    return node


def variables(node: Any) -> set[str]:
    """Names of the variables used in the parsed file (comments excluded)."""
    if isinstance(node, str):
        return {m.group(1) or m.group(4) for m in _VAR.finditer(node) if m.group(0) != "$$"}
    if isinstance(node, list):
        return set().union(*map(variables, node)) if node else set()
    if isinstance(node, dict):
        return set().union(*map(variables, node.values())) if node else set()
    return set()


RAW: dict[str, Any] = yaml.safe_load(COMPOSE_TEXT)
COMPOSE: dict[str, Any] = interpolate_tree(RAW)
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
MONITOR_IMAGE = "monitor:0.1.0"
MONITOR_SERVICES = sorted(s for s, spec in SERVICES.items() if spec["image"] == MONITOR_IMAGE)


def test_services_present() -> None:
    assert set(SERVICES) == {
        "kafka",
        "kafka-init",
        "postgres",
        "migrate",
        "demo-data",
        "register",
        "worker",
        "producer",
        "api",
        "prometheus",
        "grafana",
    }
    assert MONITOR_SERVICES == ["api", "demo-data", "migrate", "producer", "register", "worker"]


def test_interpolation_helper() -> None:
    assert interpolate("a ${X:-1} ${Y-2} $$Z ${X}", {"X": "x"}) == "a x 2 $Z x"
    with pytest.raises(AssertionError, match="no default"):
        interpolate("${NO_DEFAULT}")


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_images_pinned(service: str) -> None:
    image = SERVICES[service]["image"]
    name, _, tag = image.rpartition(":")
    assert name and "/" not in tag, f"{service}: {image} has no tag"
    assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"{service}: {image} is not pinned"


def test_official_images() -> None:
    images = {s: spec["image"].rsplit(":", 1)[0] for s, spec in SERVICES.items()}
    assert images["kafka"] == "apache/kafka" and images["postgres"] == "postgres"
    assert images["grafana"] in {"grafana/grafana", "grafana/grafana-oss"}
    assert images["prometheus"] == "prom/prometheus"
    assert all("build" in SERVICES[s] for s in MONITOR_SERVICES)


@pytest.mark.parametrize("service", MONITOR_SERVICES)
def test_monitor_commands_exist_in_the_package(service: str) -> None:
    command = SERVICES[service]["command"]
    assert isinstance(command, list), "exec form, so that SIGTERM reaches the process"
    if command[0] == "monitor":
        args = monitor_parser().parse_args(command[1:])  # SystemExit if unknown
        assert callable(args.handler)
    else:
        assert command[:3] == ["python", "-m", "monitor.ops.kafka_producer"], command
        args = replay._parser().parse_args(command[3:])
        assert args.command in {"prepare", "produce"}


def test_expected_commands() -> None:
    commands = {s: SERVICES[s]["command"] for s in MONITOR_SERVICES}
    assert commands["migrate"] == ["monitor", "db", "upgrade"]
    assert commands["worker"] == [
        "monitor",
        "run",
        "--source",
        "kafka://kafka:9092/predictions",
        "--group",
        "monitor",
    ]
    assert commands["api"] == ["monitor", "serve", "--host", "0.0.0.0", "--port", "8000"]
    assert commands["register"][:3] == ["monitor", "streams", "create"]


def test_worker_source_url_parses() -> None:
    from connectors.url import kafka_url_parts

    source = SERVICES["worker"]["command"][3]
    parts = kafka_url_parts(source)
    assert "kafka:9092" in str(parts) and "predictions" in str(parts)


def test_demo_files_line_up(tmp_path: Path) -> None:
    """``register`` and ``producer`` read what ``demo-data`` writes into the shared volume."""
    prepare = SERVICES["demo-data"]["command"]
    out = prepare[prepare.index("--out") + 1]
    assert replay.main([*prepare[3:], "--out", str(tmp_path)]) == 0  # the real step, elsewhere
    config = SERVICES["register"]["command"][3]
    produce = SERVICES["producer"]["command"]
    events = produce[produce.index("--events") + 1]
    for path in (config, events):
        assert path.startswith(f"{out}/")
        assert (tmp_path / path.removeprefix(f"{out}/")).is_file(), path
    from monitor.streams.config import load_stream_config

    stream = load_stream_config(tmp_path / config.removeprefix(f"{out}/"))
    assert Path(str(stream.calibration)).is_file()
    kinds = {json.loads(line)["kind"] for line in (tmp_path / "shuttle_events.jsonl").open()}
    assert kinds == {"prediction", "label"}  # delayed labels: the label join has work to do
    for s in ("demo-data", "register", "producer"):
        assert any(v.startswith("demo-data:/data") for v in SERVICES[s]["volumes"]), s


def test_kafka_topic_created_before_use() -> None:
    init = SERVICES["kafka-init"]["command"]
    topic = init[init.index("--topic") + 1]
    assert topic == "predictions" and "--if-not-exists" in init
    produce = SERVICES["producer"]["command"]
    assert produce[produce.index("--topic") + 1] == topic
    assert produce[produce.index("--bootstrap") + 1] == "kafka:9092"


def _depends(service: str) -> dict[str, str]:
    deps = SERVICES[service].get("depends_on", {})
    assert isinstance(deps, dict), f"{service}: depends_on needs conditions"
    return {name: spec["condition"] for name, spec in deps.items()}


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_depends_on_conditions(service: str) -> None:
    for dep, condition in _depends(service).items():
        assert dep in SERVICES, f"{service} depends on unknown {dep}"
        assert condition in {"service_healthy", "service_completed_successfully", "service_started"}
        if condition == "service_healthy":
            assert "healthcheck" in SERVICES[dep], f"{dep} needs a healthcheck"
        if condition == "service_completed_successfully":
            assert SERVICES[dep].get("restart") == "no", f"{dep} is a one-shot service"


def _requires(service: str, seen: frozenset[str] = frozenset()) -> dict[str, str]:
    """Transitive dependencies with their conditions; fails on a cycle."""
    assert service not in seen, f"dependency cycle through {service}"
    out = dict(_depends(service))
    for dep in list(out):
        for name, cond in _requires(dep, seen | {service}).items():
            out.setdefault(name, cond)
    return out


def test_start_order() -> None:
    for service in SERVICES:
        _requires(service)  # no cycles
    assert _requires("migrate")["postgres"] == "service_healthy"
    assert _requires("register")["migrate"] == "service_completed_successfully"
    worker = _requires("worker")
    assert worker["register"] == worker["kafka-init"] == "service_completed_successfully"
    assert worker["kafka"] == "service_healthy"
    assert _requires("api")["migrate"] == "service_completed_successfully"
    producer = _requires("producer")
    assert producer["worker"] == "service_started" and producer["kafka-init"].startswith(
        "service_c"
    )
    assert _requires("grafana")["migrate"] == "service_completed_successfully"
    assert _requires("prometheus")["api"] == "service_healthy"


@pytest.mark.parametrize("service", ["kafka", "postgres", "api", "prometheus", "grafana"])
def test_long_running_services_have_health_checks(service: str) -> None:
    check = SERVICES[service]["healthcheck"]
    assert check["test"][0] in {"CMD", "CMD-SHELL"} and check["retries"] >= 3


def test_bind_mounts_exist() -> None:
    for service, spec in SERVICES.items():
        for volume in spec.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{service}: {source} is missing"
            else:
                assert source in COMPOSE["volumes"], f"{service}: undeclared volume {source}"


def test_grafana_mounts_match_provisioning() -> None:
    mounts = dict(v.split(":")[:2] for v in SERVICES["grafana"]["volumes"])
    assert mounts["./dashboards"] == "/var/lib/grafana/dashboards/monitor"
    assert (
        mounts["./dashboards/provisioning/datasources"] == "/etc/grafana/provisioning/datasources"
    )
    assert mounts["./dashboards/provisioning/dashboards"] == "/etc/grafana/provisioning/dashboards"
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / "dashboards" / Path(home).name).is_file()


def test_grafana_environment_fills_the_datasource_provisioning() -> None:
    text = (ROOT / "dashboards/provisioning/datasources/monitor.yaml").read_text(encoding="utf-8")
    needed = set(re.findall(r"\$\{(\w+)\}", text))
    assert needed and needed <= set(SERVICES["grafana"]["environment"])
    env = SERVICES["grafana"]["environment"]
    assert (
        env["MONITOR_GRAFANA_PG_USER"] == SERVICES["postgres"]["environment"]["GRAFANA_READER_USER"]
    )
    assert env["MONITOR_GRAFANA_PROMETHEUS_URL"] == "http://prometheus:9090"


def _scrape_jobs() -> dict[str, dict[str, Any]]:
    config = yaml.safe_load(
        (ROOT / "dashboards/provisioning/prometheus/prometheus.yml").read_text()
    )
    return {job["job_name"]: job for job in config["scrape_configs"]}


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_prometheus_scrapes_the_api_and_the_worker() -> None:
    jobs = _scrape_jobs()
    assert set(jobs) == {"monitor-api", "monitor-worker"}
    api, worker = jobs["monitor-api"], jobs["monitor-worker"]
    # The API where `monitor serve` listens, with the read token the prometheus service writes.
    api_port = _option(SERVICES["api"]["command"], "--port")
    assert api["static_configs"][0]["targets"] == [f"api:{api_port}"]
    assert api["metrics_path"] == "/metrics"
    token_file = api["authorization"]["credentials_file"]
    assert token_file in SERVICES["prometheus"]["command"][0]
    # The worker's own metrics port (no token: only the compose network reaches it).
    worker_port = SERVICES["worker"]["environment"]["MONITOR_WORKER_METRICS_PORT"]
    assert worker["static_configs"][0]["targets"] == [f"worker:{worker_port}"]
    assert worker["metrics_path"] == "/metrics" and "authorization" not in worker
    assert f"localhost:{worker_port}/healthz" in " ".join(SERVICES["worker"]["healthcheck"]["test"])


def test_database_urls_agree() -> None:
    pg = SERVICES["postgres"]["environment"]
    url = SERVICES["migrate"]["environment"]["MONITOR_DATABASE_URL"]
    expected = (
        f"postgresql+psycopg://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}@postgres:5432/"
        f"{pg['POSTGRES_DB']}"
    )
    assert url == expected
    for s in ("migrate", "register", "worker", "api"):
        assert SERVICES[s]["environment"]["MONITOR_DATABASE_URL"] == url, s
    tokens = SERVICES["api"]["environment"]["MONITOR_API_TOKENS"]
    assert tokens.startswith("read:") and ",write:" in tokens
    assert SERVICES["prometheus"]["environment"]["MONITOR_READ_TOKEN"] in tokens


SECRET_KEY = re.compile(r"PASSWORD|TOKEN|SECRET|_KEY$")


def test_no_hard_coded_secrets() -> None:
    """Every credential comes from a variable whose default is marked for local use only."""
    for service, spec in RAW["services"].items():
        for key, value in (spec.get("environment") or {}).items():
            if SECRET_KEY.search(key) or key in {"MONITOR_DATABASE_URL", "MONITOR_API_TOKENS"}:
                assert "${" in str(value), f"{service}.{key} is hard-coded"
    defaults = re.findall(r"\$\{\w*(?:PASSWORD|TOKEN)\w*:-([^}]*)\}", COMPOSE_TEXT)
    assert defaults and all(re.search(r"local|change-me", d) for d in defaults), defaults


def test_ports_bind_to_localhost_by_default_and_are_documented() -> None:
    docs = (ROOT / "docs" / "compose.md").read_text(encoding="utf-8")
    for service, spec in SERVICES.items():
        for port in spec.get("ports", []):
            address, host, _container = port.split(":")
            assert address == "127.0.0.1", f"{service}: {port}"
            assert f"`{host}`" in docs, f"port {host} of {service} is not in docs/compose.md"


def test_compose_variables_are_documented() -> None:
    docs = (ROOT / "docs" / "compose.md").read_text(encoding="utf-8")
    names = variables(RAW)
    assert "POSTGRES_PASSWORD" in names
    missing = sorted(n for n in names if f"`{n}`" not in docs)
    assert not missing, f"undocumented variables: {missing}"


def test_worker_stops_cleanly() -> None:
    worker = SERVICES["worker"]
    assert worker["stop_signal"] == "SIGTERM" and worker["restart"] == "unless-stopped"


# -- Dockerfile ------------------------------------------------------------------------------

DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def _instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", DOCKERFILE)
    lines = [
        ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]


def test_dockerfile_base_and_install() -> None:
    steps = _instructions()
    assert steps[0] == ("FROM", "python:3.11-slim")
    runs = " ".join(arg for op, arg in steps if op == "RUN")
    # The image runs the service: the core and the server, PostgreSQL and Kafka extras.
    assert "pip install '.[server,postgres,kafka]'" in runs
    assert "pip install --no-deps -e '.[server,postgres,kafka]'" in runs
    assert "pip uninstall --yes conformal-monitor" in runs  # the empty package of the deps layer
    assert ("USER", "monitor") in steps


def test_dockerfile_copies_existing_paths_not_ignored() -> None:
    ignored = {
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    }
    for op, arg in _instructions():
        if op == "COPY":
            *sources, _dest = shlex.split(arg)
            for source in sources:
                assert (ROOT / source).exists(), source
                assert source not in ignored, f"{source} is in .dockerignore"
    assert {".venv", ".git", "tests"} <= ignored
