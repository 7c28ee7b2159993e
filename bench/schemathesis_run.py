"""Run schemathesis (every phase, every check) in process against the app's own OpenAPI schema.

The app is called through its ASGI interface, so the run needs no network and no server; the
database behind it is real. Used by ``tests/api/test_schema.py`` (a bounded budget) and by
``bench/bench_api.py --fuzz`` (a larger one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events
from schemathesis.engine import from_schema as engine_for
from schemathesis.transport import requests as schemathesis_requests

PHASES = ("examples", "coverage", "fuzzing", "stateful")

#: Operations whose valid-by-schema requests can still be refused (422) for reasons OpenAPI cannot
#: express, where schemathesis' ``positive_data_acceptance`` check does not apply: an opaque
#: ``cursor`` that no page produced, ``since`` later than ``until``, calibration rows that are
#: not a usable labeled data set for the task. Every other check still runs on them.
SEMANTIC_422 = [
    {"include-method": "GET", "include-path-regex": "^/alarms$|/trace$|/ood$"},
    {"include-method": "POST", "include-path": "/streams"},
]


#: The stream configuration's booleans accept 0 and 1 (pydantic's lax mode, as ``POST /streams``,
#: whose generated requests on the seeded names end in a 409 before it shows). A ``PUT`` stores
#: such a request as a new version.
LAX_PUT = {
    "include-method": "PUT",
    "include-path": "/streams/{name}",
    "checks": {
        "positive_data_acceptance": {"enabled": False},
        "negative_data_rejection": {"enabled": False},
    },
}


def _opened_connections(session: Any) -> int:
    """schemathesis counts pooled connections through ``PoolManager.pools.keys()``, which
    urllib3-future (installed over urllib3 by grafana-client → niquests) does not offer. Calls go
    through ASGI here, so there are no sockets to count."""
    return 0


schemathesis_requests._count_opened_connections = _opened_connections


@dataclass
class FuzzReport:
    """What a schemathesis run found."""

    cases: int = 0
    operations: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Time spent answering, per operation label (where a run's time goes).
    busy: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [
            f"{self.cases} cases over {len(self.operations)} operations in "
            f"{self.seconds:.1f} s: {len(self.failures)} failures, {len(self.errors)} errors"
        ]
        busy = ", ".join(
            f"{k} {v:.1f}s" for k, v in sorted(self.busy.items(), key=lambda kv: -kv[1])
        )
        return "\n".join(
            [*lines, f"time answering: {busy}", *self.failures[:20], *self.errors[:20]]
        )


def run(
    app: Any,
    headers: Mapping[str, str],
    max_examples: int,
    seed: int = 0,
    phases: Sequence[str] = PHASES,
) -> FuzzReport:
    """schemathesis with every check enabled (the default) against ``app``."""
    config = SchemathesisConfig.from_dict(
        {
            "seed": seed,
            "headers": dict(headers),
            "generation": {"max-examples": max_examples},
            "phases": {name: {"enabled": name in phases} for name in PHASES},
            "suppress-health-check": ["all"],
            "operations": [
                selector | {"checks": {"positive_data_acceptance": {"enabled": False}}}
                for selector in SEMANTIC_422
            ]
            + [LAX_PUT],
        }
    )
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=config)
    report = FuzzReport()
    for event in engine_for(schema).execute():
        _collect(event, report)
    return report


def _describe(recorder: Any, case_id: str, check: Any) -> str:
    """One line per failure: operation, check, status, and the request (truncated)."""
    case = recorder.cases[case_id].value
    interaction = recorder.interactions.get(case_id)
    status = interaction.response.status_code if interaction and interaction.response else "?"
    curl = case.as_curl_command()
    curl = curl if len(curl) < 400 else curl[:200] + "…" + curl[-200:]
    return (
        f"{recorder.label} [{check.name}] {check.failure_info.failure.title} "
        f"(status {status}): {curl}"
    )


def _collect(event: Any, report: FuzzReport) -> None:
    if isinstance(event, events.ScenarioFinished):
        report.cases += len(event.recorder.cases)
        report.operations.add(event.recorder.label)
        elapsed = sum(
            i.response.elapsed
            for i in event.recorder.interactions.values()
            if i.response is not None
        )
        report.busy[event.recorder.label] = report.busy.get(event.recorder.label, 0.0) + elapsed
        for case_id, checks in event.recorder.checks.items():
            for check in checks:
                if check.failure_info is not None:
                    report.failures.append(_describe(event.recorder, case_id, check))
    elif isinstance(event, events.NonFatalError):
        report.errors.append(f"{event.label}: {event.info.title}: {event.info.message}")
    elif isinstance(event, events.FatalError):
        raise event.exception
    elif isinstance(event, events.EngineFinished):
        report.seconds = event.running_time
