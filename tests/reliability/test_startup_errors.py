"""Start-up mistakes end in one line on stderr that says what to do, a non-zero exit code and no
traceback: an unreachable database, a bad database URL, a bad API token scope, a configuration
file that is not UTF-8, and bad numeric options or settings.

Most cases call the CLI entry point in process (``monitor.cli.main`` with ``capsys``); one runs
the real ``monitor`` process so that nothing else (logging, warnings) reaches stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.cli.main import main
from tests.support.cli_errors import closed_port, one_line

ROOT = Path(__file__).resolve().parents[2]




@pytest.fixture
def not_utf8(tmp_path: Path) -> str:
    path = tmp_path / "stream.yaml"
    path.write_bytes(b"name: caf\xe9\ntask: regression\ncalibration: cal.jsonl\n")
    return str(path)




def test_unreachable_database(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"postgresql+psycopg://postgres:secret@127.0.0.1:{closed_port()}/monitor"
    assert main(["--db", url, "streams", "list"]) == 1
    err = one_line(capsys)
    assert "cannot connect to the database" in err and "secret" not in err
    assert "--db" in err and "MONITOR_DATABASE_URL" in err


@pytest.mark.parametrize(
    "url", ["nonsense", "mysql://u@h/db", "postgresql+psycopg://u@h:notaport/d"]
)
def test_bad_database_url(capsys: pytest.CaptureFixture[str], url: str) -> None:
    assert main(["--db", url, "streams", "list"]) == 2
    err = one_line(capsys)
    assert "database URL" in err and "postgresql+psycopg://" in err and "sqlite:///" in err


def test_bad_token_scope(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                         tmp_path: Path) -> None:
    monkeypatch.setenv("MONITOR_API_TOKENS", "admin:abcdef")
    assert main(["--db", f"sqlite:///{tmp_path}/m.db", "serve", "--port", "0"]) == 2
    err = one_line(capsys)
    assert "unknown API token scope 'admin'" in err and "MONITOR_API_TOKENS" in err
    assert "abcdef" not in err


@pytest.mark.parametrize("command", ["create", "run"])
def test_configuration_that_is_not_utf8(
    capsys: pytest.CaptureFixture[str], not_utf8: str, tmp_path: Path, command: str
) -> None:
    db = f"sqlite:///{tmp_path}/m.db"
    argv = (["--db", db, "streams", "create", not_utf8] if command == "create" else
            ["--db", db, "run", "--source", f"file:{tmp_path}/e.jsonl", "--config", not_utf8])
    assert main(argv) != 0
    err = one_line(capsys)
    assert "not UTF-8" in err and "save it as UTF-8" in err


@pytest.mark.parametrize(("option", "value"), [
    ("--checkpoint-every", "-1"), ("--checkpoint-every", "0"), ("--batch-size", "0"),
    ("--batch-size", "x"),
])
def test_bad_numeric_run_options(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                 option: str, value: str) -> None:
    argv = ["--db", f"sqlite:///{tmp_path}/m.db", "run", "--source", "file:e.jsonl",
            option, value]
    assert main(argv) == 2
    err = one_line(capsys)
    assert option in err and "--help" in err


@pytest.mark.parametrize("argv", [
    ["serve", "--port", "70000"], ["serve", "--workers", "-3"], ["alarms", "list", "--limit", "0"],
], ids=["port", "workers", "limit"])
def test_other_bad_numeric_options(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(["--db", "sqlite://", *argv]) == 2
    one_line(capsys)


@pytest.mark.parametrize(("variable", "value"), [
    ("MONITOR_CHECKPOINT_EVERY", "-1"), ("MONITOR_BATCH_SIZE", "0"),
    ("MONITOR_MAX_BODY_BYTES", "lots"), ("MONITOR_AUTO_MIGRATE", "perhaps"),
])
def test_bad_settings(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                      variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    assert main(["--db", "sqlite://", "streams", "list"]) == 2
    err = one_line(capsys)
    assert f"{variable}={value!r}" in err


def test_missing_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    one_line(capsys)


def test_the_real_process_prints_one_line() -> None:
    """Nothing but the message reaches stderr (no log lines, no warnings, no traceback)."""
    url = f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/monitor"
    code = "import sys; from monitor.cli.main import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run(
        [sys.executable, "-c", code, "--db", url, "run", "--source", "file:x.jsonl"],
        capture_output=True, text=True, timeout=60,
        env=os.environ | {"PYTHONPATH": str(ROOT)}, cwd=ROOT,
    )
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("monitor: error: cannot connect to the database")
