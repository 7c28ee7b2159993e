"""Shared fixtures: the dashboards of dashboards/*.json (helpers in tests/support/dashboards.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.dashboards import load_dashboards


@pytest.fixture(scope="session")
def dashboards() -> list[dict[str, Any]]:
    return load_dashboards()
