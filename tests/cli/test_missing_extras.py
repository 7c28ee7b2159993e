"""A missing extra is named, not a traceback: the CLI and the connectors with a module hidden.

Each check runs in a new interpreter in which one module is hidden (``sys.modules[name] = None``
makes its import fail as an absent package's does), so nothing imported by this test process
interferes. The fresh environments of ``test_wheel_install.py`` check the same for real installs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]


def _python(code: str, hidden: str) -> subprocess.CompletedProcess[str]:
    prelude = f"import sys; sys.modules[{hidden!r}] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("argv", "hidden", "extra"),
    [
        (["serve"], "sqlalchemy", "server"),
        (["dashboards", "push", "--grafana-url", "http://g"], "sqlalchemy", "server"),
        (["--db", "postgresql+psycopg://u@db/monitor", "db", "upgrade"], "psycopg", "postgres"),
    ],
    ids=["serve", "dashboards", "postgres"],
)
def test_cli_names_the_extra(argv: list[str], hidden: str, extra: str) -> None:
    done = _python(f"from monitor.cli.main import main; sys.exit(main({argv!r}))", hidden)
    command = next(arg for arg in argv if not arg.startswith("-") and "://" not in arg)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"monitor: error: monitor {command} needs the {extra} extra: "
        f"pip install 'conformal-monitor[{extra}]' (no module {hidden})\n"
    )


def test_cli_reraises_a_missing_module_of_its_own() -> None:
    """A module of the project itself missing is a broken install or a bug: its traceback."""
    serve = "from monitor.cli.main import main; sys.exit(main(['serve']))"
    done = _python(serve, "monitor.db.engine")
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ModuleNotFoundError" in done.stderr
    assert "extra" not in done.stderr


def test_connectors_import_kafka_on_first_use() -> None:
    done = _python(
        "import connectors\n"
        "print(connectors.FileSource.__name__, 'connectors.kafka' in sys.modules)\n"
        "try:\n"
        "    connectors.KafkaSource\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "connectors.open_source('kafka://broker:9092/events', group='g')\n",
        "kafka",
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "FileSource False"  # the file source without kafka-python
    assert lines[1] == (
        "MissingExtraError connectors.KafkaSource needs the kafka extra: "
        "pip install 'conformal-monitor[kafka]' (no module kafka)"
    )
    assert done.returncode == 1
    assert done.stderr.strip().endswith(
        "the source kafka://broker:9092/events needs the kafka extra: "
        "pip install 'conformal-monitor[kafka]' (no module kafka)"
    )
