"""The front door's public names: at the top level of ``monitor``, loaded on first use, without
pandas."""

from __future__ import annotations

from tests.support.probe import assert_in_fresh_interpreter


def test_the_front_door_loads_lazily_and_without_pandas() -> None:
    probe = (
        "import sys, monitor\n"
        "assert {'stream_from', 'to_events', 'StreamFiles'} <= set(dir(monitor))\n"
        "assert 'monitor.frontdoor' not in sys.modules\n"
        "assert callable(monitor.stream_from) and monitor.to_events.__module__ == "
        "'monitor.frontdoor'\n"
        "assert 'pandas' not in sys.modules, 'pandas imported'\n"
    )
    assert_in_fresh_interpreter(probe)
