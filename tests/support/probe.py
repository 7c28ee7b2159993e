"""A snippet of asserts in a fresh interpreter: what ``import`` loads (lazy names, modules kept
out of a light import) can only be seen from a process that imported nothing before."""

from __future__ import annotations

import subprocess
import sys


def assert_in_fresh_interpreter(probe: str) -> None:
    """Run ``probe`` with this test run's Python; fail with its stderr unless it exits 0."""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
