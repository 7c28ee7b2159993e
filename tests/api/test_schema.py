"""schemathesis against the app's own OpenAPI schema, over a database holding real rows.

Every phase (documented examples, coverage, fuzzing, stateful) and every check schemathesis knows:
no 5xx, status codes, content types, headers and bodies as documented, invalid data rejected,
valid data accepted. CI runs a bounded number of examples per operation;
``bench/bench_api.py --fuzz N`` runs the same with a larger budget.
"""

from __future__ import annotations

import os

from sqlalchemy import Engine

from bench import schemathesis_run
from bench.api_rows import WRITE, make_settings, seed
from monitor.api import create_app
from monitor.db.engine import session_factory

#: Generated examples per operation (CI). Raise with MONITOR_FUZZ_EXAMPLES for a longer run.
EXAMPLES = int(os.environ.get("MONITOR_FUZZ_EXAMPLES", "5"))


def test_api_conforms_to_its_schema(database_url: str, engine: Engine) -> None:
    with session_factory(engine)() as session:
        seed(session)
    # A body limit above anything generated: schema-valid batches must be accepted (the limit
    # itself is tested in test_limits.py).
    app = create_app(make_settings(database_url, max_body_bytes=256 * 2**20))
    report = schemathesis_run.run(app, WRITE, max_examples=EXAMPLES, seed=1)
    print(report.summary())
    assert len(report.operations - {"Stateful tests"}) == 19, report.operations
    assert report.cases > 19 * 20, "schemathesis must actually have run"
    assert not report.failures and not report.errors, report.summary()
