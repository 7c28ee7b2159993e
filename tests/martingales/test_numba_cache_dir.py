"""numba's on-disk cache goes to a user cache directory, not beside the installed modules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

PROBE = """
import numpy as np, numba
from monitor.core.martingales.batch import _lambda_path
_lambda_path(np.full(4, 0.5), 0, 4, 0.5)
print(numba.config.CACHE_DIR)
"""


def _run(tmp_path: Path, **env: str) -> str:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")
    }
    environ |= {"HOME": str(tmp_path / "home")} | env
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_default_is_the_xdg_cache_home(tmp_path: Path) -> None:
    cache = tmp_path / "xdg"
    assert _run(tmp_path, XDG_CACHE_HOME=str(cache)) == str(cache / "monitor" / "numba")
    assert list((cache / "monitor" / "numba").rglob("*.nbi")), "kernels cached there"


def test_without_xdg_it_is_home_dot_cache(tmp_path: Path) -> None:
    expected = tmp_path / "home" / ".cache" / "monitor" / "numba"
    assert _run(tmp_path) == str(expected)


def test_a_user_setting_is_kept(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    assert _run(tmp_path, NUMBA_CACHE_DIR=str(mine)) == str(mine)
    assert list(mine.rglob("*.nbi"))
