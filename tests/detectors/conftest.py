"""Small seeded data for the detector tests (synthetic for speed; Shuttle where stated)."""

from __future__ import annotations

import pytest

from tests.support.toy_streams import Toy, make_toy


@pytest.fixture(scope="session")
def toy() -> Toy:
    return make_toy()
