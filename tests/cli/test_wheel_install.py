"""The built wheel in fresh virtual environments outside the checkout.

One environment holds the core install only (``pip install conformal-monitor``): ``monitor.watch``
monitors a bundled dataset there, no module of an extra can be imported, and the ``monitor``
command names the extra a service command needs. Another holds the server extra
(``conformal-monitor[server]``): it migrates a new SQLite database, runs the demo and serves the
API, while PostgreSQL's and Kafka's drivers stay out.

The wheel is built from this checkout (pip's build isolation fetches the build backend from the
configured package index). Each environment is a new ``python -m venv`` without a pip of its own:
the running pip installs into it (``--python``, ``--no-compile``), which keeps each install to
seconds, and resolves the dependencies from the configured package index. The commands run from a
temporary folder with no ``PYTHONPATH``, so nothing of the checkout can be imported.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from monitor.errors import EXTRA_OF_MODULE

CHECKOUT = Path(__file__).resolve().parents[2]
#: Seconds any one build, install or command may take (a bound, never a measurement).
STEP_TIMEOUT = 300

#: Prints the modules of ``sys.argv[1:]`` that the environment could import.
IMPORTABLE = (
    "import importlib.util, json, sys; "
    "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None]))"
)

#: The notebook API on the bundled Shuttle data: 200 stable events, then 100 far outside the
#: calibration support. Prints where monitor came from, its versions and the alarms.
WATCH = """
import json
from importlib.metadata import version

import monitor
from monitor.ops.datasets import load_shuttle_regression, make_stream

data = make_stream(
    load_shuttle_regression(), [("stable", 200), ("extreme_covariate", 100)],
    n_calibration=300, seed=0,
)
shuttle = monitor.watch((data.X_calibration, data.pred_calibration, data.y_calibration))
alarms = shuttle.update(data.X, data.pred, data.y)
print(json.dumps({
    "file": monitor.__file__,
    "version": monitor.__version__,
    "distribution": version("conformal-monitor"),
    "alarms": [[a.detector, a.kind, a.event_index] for a in alarms],
}))
"""


def _run(
    args: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist)]
    built = _run([*pip, str(CHECKOUT)], dist)
    if built.returncode != 0:
        pytest.fail(f"building the wheel failed (is a package index reachable?):\n{built.stderr}")
    (path,) = dist.glob("conformal_monitor-*-py3-none-any.whl")
    return path


def _venv(root: Path, requirement: str) -> Path:
    """A new environment at ``root`` with ``requirement`` installed; returns its ``bin``."""
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(root)], root.parent)
    assert made.returncode == 0, made.stderr
    python = root / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile"]
    done = _run([*pip, requirement], root.parent)
    assert done.returncode == 0, f"installing {requirement} failed:\n{done.stderr}"
    return root / "bin"


def _env(work: Path) -> dict[str, str]:
    """The environment of a user outside the checkout: no project settings, a cache of its own."""
    drop = ("MONITOR_", "NUMBA_", "PYTHON", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return env | {"XDG_CACHE_HOME": str(work / "cache")}


def _importable(bin_dir: Path, work: Path, modules: list[str]) -> list[str]:
    probe = _run([str(bin_dir / "python"), "-c", IMPORTABLE, *modules], work, _env(work))
    assert probe.returncode == 0, probe.stderr
    found: list[str] = json.loads(probe.stdout)
    return found


def test_core_install_is_lean_and_watches(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bin_dir = _venv(tmp_path_factory.mktemp("core") / "venv", str(wheel))
    work = tmp_path_factory.mktemp("core-work")
    # No module of any extra: not FastAPI, SQLAlchemy, Kafka's clients, psycopg nor pandas.
    assert _importable(bin_dir, work, sorted(EXTRA_OF_MODULE)) == []

    watched = _run([str(bin_dir / "python"), "-c", WATCH], work, _env(work))
    assert watched.returncode == 0, watched.stderr
    result = json.loads(watched.stdout)
    assert Path(result["file"]).is_relative_to(bin_dir.parent)
    assert result["version"] == result["distribution"] == wheel.name.split("-")[1]
    alarms = [tuple(alarm) for alarm in result["alarms"]]
    assert alarms and all(index >= 200 for _, _, index in alarms), alarms  # none while stable
    assert ("covariate", "extreme_covariate_shift") in {(d, kind) for d, kind, _ in alarms}

    serve = _run([str(bin_dir / "monitor"), "serve"], work, _env(work))
    assert serve.returncode == 2 and serve.stdout == ""
    assert serve.stderr.startswith(
        "monitor: error: monitor serve needs the server extra: "
        "pip install 'conformal-monitor[server]'"
    ), serve.stderr
    assert "Traceback" not in serve.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_server_install_migrates_runs_the_demo_and_serves(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bin_dir = _venv(tmp_path_factory.mktemp("server") / "venv", f"{wheel}[server]")
    work = tmp_path_factory.mktemp("server-work")
    drivers = [m for m, extra in EXTRA_OF_MODULE.items() if extra in ("postgres", "kafka")]
    assert _importable(bin_dir, work, drivers) == []
    _check_named_extras(bin_dir, work)
    url = _check_upgrade(bin_dir, work)
    _check_demo(bin_dir, work)
    _check_serve(bin_dir, work, url, version=wheel.name.split("-")[1])


def _check_named_extras(bin_dir: Path, work: Path) -> None:
    """Without the postgres and kafka extras, PostgreSQL and Kafka say which extra to install."""
    upgrade = _run(
        [str(bin_dir / "monitor"), "db", "upgrade", "--db", "postgresql+psycopg://db/monitor"],
        work,
        _env(work),
    )
    assert upgrade.returncode == 2, upgrade.stderr
    assert "pip install 'conformal-monitor[postgres]'" in upgrade.stderr
    source = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "import connectors; connectors.open_source('kafka://broker:9092/events', group='g')",
        ],
        work,
        _env(work),
    )
    assert source.returncode == 1
    assert (
        "MissingExtraError: the source kafka://broker:9092/events needs the kafka extra: "
        "pip install 'conformal-monitor[kafka]'"
    ) in source.stderr


def _check_upgrade(bin_dir: Path, work: Path) -> str:
    """``monitor db upgrade`` migrates a new SQLite file with the migrations of the package."""
    url = f"sqlite:///{work}/fresh.db"
    up = _run([str(bin_dir / "monitor"), "db", "upgrade", "--db", url], work, _env(work))
    assert up.returncode == 0, up.stderr
    assert "at revision head" in up.stdout
    where = _run(
        [
            str(bin_dir / "python"),
            "-c",
            "import sys; import monitor.db.migrate as m; "
            "print(m.alembic_config().get_main_option('script_location')); "
            "print(m.current_revision(sys.argv[1]))",
            url,
        ],
        work,
        _env(work),
    )
    assert where.returncode == 0, where.stderr
    scripts, revision = where.stdout.split()
    assert Path(scripts).is_relative_to(bin_dir.parent) and revision != "None"
    return url


def _check_demo(bin_dir: Path, work: Path) -> None:
    """The demo, into a folder of its own: alarms only after the first scripted change, one
    report per alarm, numba's kernels in the user cache and not beside the package."""
    demo = _run([str(bin_dir / "monitor"), "demo", "--out", "demo", "--json"], work, _env(work))
    assert demo.returncode == 0, demo.stderr
    summary = json.loads(demo.stdout.strip().splitlines()[-1])
    assert (work / "demo" / "demo.db").exists()
    first_change = min(summary["truth"]["change_points"])
    alarms = sorted(summary["alarms"], key=lambda a: (a["event_index"], a["detector"]))
    assert alarms and all(a["event_index"] >= first_change for a in alarms)
    reports = [work / path for path in summary["reports"]]
    assert len(reports) == len(alarms)
    for path, alarm in zip(reports, alarms, strict=True):
        page = path.read_text(encoding="utf-8")
        kind = alarm["kind"].replace("_", " ")
        assert f"<title>{alarm['stream']}: {kind} ({alarm['detector']} detector), " in page
        assert f'<p class="id">alarm {alarm["id"]}</p>' in page
    assert list((work / "cache" / "monitor" / "numba").rglob("*.nbi"))
    assert not list(bin_dir.parent.rglob("*.nbi"))


def _check_serve(bin_dir: Path, work: Path, url: str, version: str) -> None:
    """``monitor serve`` answers /health (with the package's version) and a token's /alarms."""
    port = _free_port()
    server = subprocess.Popen(
        [str(bin_dir / "monitor"), "serve", "--db", url, "--port", str(port)],
        cwd=work,
        env=_env(work) | {"MONITOR_API_TOKENS": "read:wheel-test"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"{base}/health", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()[0]
                assert time.monotonic() < deadline, "monitor serve did not answer within 60 s"
                time.sleep(0.2)
        assert health.status_code == 200, health.text
        assert health.json() == {"status": "ok", "database": "ok", "version": version}
        alarms = httpx.get(
            f"{base}/alarms", headers={"Authorization": "Bearer wheel-test"}, timeout=5
        )
        assert alarms.status_code == 200 and alarms.json()["data"] == [], alarms.text
        assert httpx.get(f"{base}/alarms", timeout=5).status_code == 401
    finally:
        server.terminate()
        server.communicate(timeout=30)
