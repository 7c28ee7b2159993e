"""The CLI's start-up errors: a port nothing listens on, the one line a failed command writes."""

from __future__ import annotations

import socket

import pytest


def closed_port() -> int:
    """A local port that was free a moment ago, so nothing listens on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The captured stderr, checked to be one ``monitor: error:`` line without a traceback."""
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert err.startswith("monitor: error: "), err
    return err
