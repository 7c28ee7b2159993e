"""An installed wheel, outside the checkout, migrates a new database, runs the demo and serves.

The wheel is built from this checkout (pip's build isolation fetches the build backend from the
configured package index; no network is needed when that index is local) and installed with
``--no-deps --target`` into a temporary folder; its dependencies come from the running
environment. The commands run from another folder, with that folder first on ``PYTHONPATH``, and
the test checks that ``monitor`` was imported from the installed copy.
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

CHECKOUT = Path(__file__).resolve().parents[2]


def _python(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(root / "dist"),
            str(CHECKOUT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if built.returncode != 0:
        pytest.fail(f"building the wheel failed (is a package index reachable?):\n{built.stderr}")
    (wheel,) = (root / "dist").glob("monitor-*.whl")
    target = root / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return target


def _env(installed: Path, work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MONITOR_", "NUMBA_"))}
    return env | {"PYTHONPATH": str(installed), "XDG_CACHE_HOME": str(work / "cache")}


def test_imported_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    probe = _python(
        [
            "-c",
            "import monitor, monitor.db.migrate as m; print(monitor.__file__); "
            "print(m.alembic_config().get_main_option('script_location'))",
        ],
        tmp_path,
        _env(installed, tmp_path),
    )
    assert probe.returncode == 0, probe.stderr
    module, scripts = probe.stdout.split()
    assert Path(module).is_relative_to(installed), module
    assert Path(scripts).is_relative_to(installed), scripts
    assert not Path(module).is_relative_to(CHECKOUT)


def test_db_upgrade_and_demo_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    env = _env(installed, tmp_path)
    url = f"sqlite:///{tmp_path}/fresh.db"
    up = _python(["-m", "monitor.cli", "db", "upgrade", "--db", url], tmp_path, env)
    assert up.returncode == 0, up.stderr
    assert "at revision head" in up.stdout
    check = _python(
        [
            "-c",
            "import sys; from monitor.db.migrate import current_revision; "
            "print(current_revision(sys.argv[1]))",
            url,
        ],
        tmp_path,
        env,
    )
    assert check.returncode == 0 and check.stdout.strip() not in ("", "None"), check.stderr

    demo = _python(["-m", "monitor.cli", "demo", "--out", "demo", "--json"], tmp_path, env)
    assert demo.returncode == 0, demo.stderr
    summary = json.loads(demo.stdout.strip().splitlines()[-1])
    assert summary
    assert (tmp_path / "demo" / "demo.db").exists()
    # one alarm report per alarm, each a page naming its alarm
    reports = [tmp_path / path for path in summary["reports"]]
    assert len(reports) == len(summary["alarms"]) >= 1
    for path, alarm in zip(reports, sorted(summary["alarms"], key=lambda a: (
            a["event_index"], a["detector"])), strict=True):
        page = path.read_text(encoding="utf-8")
        kind = alarm["kind"].replace("_", " ")
        assert f"<title>{alarm['stream']}: {kind} ({alarm['detector']} detector), " in page
        assert f'<p class="id">alarm {alarm["id"]}</p>' in page
    # numba compiled into the user cache directory, not into the installed package
    assert list((tmp_path / "cache" / "monitor" / "numba").rglob("*.nbi"))
    assert not list(installed.rglob("*.nbi"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    """`monitor serve` of the installed copy answers the API on a database it migrated."""
    env = _env(installed, tmp_path)
    url = f"sqlite:///{tmp_path}/served.db"
    up = _python(["-m", "monitor.cli", "db", "upgrade", "--db", url], tmp_path, env)
    assert up.returncode == 0, up.stderr
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "monitor.cli", "serve", "--db", url, "--port", str(port)],
        cwd=tmp_path,
        env=env | {"MONITOR_API_TOKENS": "read:wheel-test"},
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
        alarms = httpx.get(
            f"{base}/alarms", headers={"Authorization": "Bearer wheel-test"}, timeout=5
        )
        assert alarms.status_code == 200 and alarms.json()["data"] == [], alarms.text
        assert httpx.get(f"{base}/alarms", timeout=5).status_code == 401
    finally:
        server.terminate()
        server.communicate(timeout=30)
