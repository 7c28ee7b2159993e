"""schemathesis against the app's own OpenAPI schema, over a database holding real rows.

Every phase (documented examples, coverage, fuzzing, stateful) and every check schemathesis knows:
no 5xx, status codes, content types, headers and bodies as documented, invalid data rejected,
valid data accepted. CI runs a bounded number of examples per operation;
``bench/bench_api.py --fuzz N`` runs the same with a larger budget.
"""

from __future__ import annotations

import os

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from monitor.api import create_app
from monitor.db.engine import session_factory
from monitor.streams.records import PerformanceWindow
from tests.api import fuzz
from tests.api.factories import (
    T0,
    WRITE,
    alarm,
    checkpoint,
    dead_letter,
    make_settings,
    ood_window,
    register,
    store,
    trace,
)

#: Generated examples per operation (CI). Raise with MONITOR_FUZZ_EXAMPLES for a longer run.
EXAMPLES = int(os.environ.get("MONITOR_FUZZ_EXAMPLES", "5"))


def seed(session: Session) -> None:
    """Rows of every kind, on the stream names the OpenAPI examples use."""
    for name in ("bikes", "taxis"):
        register(session, name)
    store(
        session,
        alarms=[alarm("bikes" if i % 2 else "taxis", i) for i in range(60)],
        trace_points=trace("bikes", "covariate", range(0, 3000, 3))
        + trace("bikes", "conditional", range(1, 3000, 7)),
        ood_windows=[ood_window("bikes", w, (f"e-{w}",)) for w in range(12)],
        performance_windows=[
            PerformanceWindow("bikes", w, 500 * w, 500 * w + 499, T0, 500, {"mae": 1.5})
            for w in range(4)
        ],
        dead_letters=[dead_letter(i) for i in range(3)],
        # A stream that is not registered (monitored with `monitor run --config`).
        checkpoints={"legacy": checkpoint("legacy", 3000, pending_ts=[1.7e9])},
    )


def test_api_conforms_to_its_schema(database_url: str, engine: Engine) -> None:
    with session_factory(engine)() as session:
        seed(session)
    # A body limit above anything generated: schema-valid batches must be accepted (the limit
    # itself is tested in test_limits.py).
    app = create_app(make_settings(database_url, max_body_bytes=256 * 2**20))
    report = fuzz.run(app, WRITE, max_examples=EXAMPLES, seed=1)
    print(report.summary())
    assert len(report.operations - {"Stateful tests"}) == 19, report.operations
    assert report.cases > 19 * 20, "schemathesis must actually have run"
    assert not report.failures and not report.errors, report.summary()
