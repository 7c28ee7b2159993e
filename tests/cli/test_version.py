"""``monitor --version`` prints the installed version and exits 0."""

from __future__ import annotations

import sys
import types
from importlib.metadata import distributions, version

import pytest

from monitor.cli.main import main


def _version_output(capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import monitor._version  # written by the build, when it is
    except ImportError:
        names = {d.metadata["Name"] for d in distributions()}
        expected = version("conformal-monitor" if "conformal-monitor" in names else "monitor")
    else:
        expected = monitor._version.__version__
    assert _version_output(capsys) == f"monitor {expected}\n"


def test_a_version_module_comes_first(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    written = types.ModuleType("monitor._version")
    written.__version__ = "7.3.1.dev4"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "monitor._version", written)
    assert _version_output(capsys) == "monitor 7.3.1.dev4\n"


def test_version_after_a_subcommand_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["alarms", "--version"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
