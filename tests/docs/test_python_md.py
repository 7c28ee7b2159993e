"""docs/python.md is executed: every example in it must produce the output it shows."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"


def test_python_walkthrough_runs() -> None:
    pytest.importorskip("pandas", reason="docs/python.md shows DataFrames (pandas is in [dev])")
    result = doctest.testfile(
        str(DOC), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False,
        raise_on_error=False, report=True,
    )
    assert result.attempted > 30
    assert result.failed == 0, f"{result.failed} example(s) of {DOC.name} failed (see above)"
