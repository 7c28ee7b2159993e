"""The imports the docs showed before the layout (issue 25) keep working."""

from __future__ import annotations


def test_the_imports_documented_before_the_layout_still_work() -> None:
    from monitor.core.ood import make_scorer as home
    from monitor.datasets import load_shuttle_regression, make_stream
    from monitor.ood import load_last_layer, make_scorer
    from monitor.ops.datasets import make_stream as datasets_home

    assert make_scorer is home and make_stream is datasets_home
    assert callable(load_shuttle_regression) and callable(load_last_layer)


def test_a_receiver_verifies_a_signature_with_the_old_name() -> None:
    import monitor.alerts
    import monitor.webhooks

    assert monitor.webhooks.verify is monitor.alerts.verify


def test_the_queries_keep_their_old_module_name() -> None:
    import monitor.db.queries
    import monitor.db.repositories

    assert monitor.db.repositories.performance_windows is monitor.db.queries.performance_windows
    assert set(monitor.db.queries.__all__) < set(monitor.db.repositories.__all__)
