"""``POST /events``: batch ingest through the worker's validation and dead-letter path."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Security, status

from monitor.api.deps import IngestorDep, bearer
from monitor.api.errors import WRITE_ERRORS
from monitor.api.schemas import AlarmPublic, DeadLetterItem, EventsAccepted

router = APIRouter(tags=["events"], dependencies=[Security(bearer)], responses=WRITE_ERRORS)

#: Most items in one request; larger batches must be split (the body size limit applies too).
MAX_BATCH = 10_000

EXAMPLES = {
    "regression": {
        "summary": "Two predictions (one with its label) and a late label",
        "value": [
            {
                "kind": "prediction",
                "stream": "bikes",
                "id": "e-000123",
                "ts": "2026-11-30T12:00:00Z",
                "features": [0.3, 1.2, 5.0],
                "prediction": 41.7,
            },
            {
                "kind": "prediction",
                "stream": "bikes",
                "id": "e-000124",
                "features": [0.2, 1.0, 4.0],
                "prediction": 38.1,
                "label": 36.0,
            },
            {
                "kind": "label",
                "stream": "bikes",
                "id": "e-000123",
                "ts": "2026-11-30T13:00:00Z",
                "label": 57,
            },
        ],
    },
    "classification": {
        "summary": "A classifier's prediction with logits and an embedding",
        "value": [
            {
                "kind": "prediction",
                "stream": "digits",
                "id": "e-9",
                "features": {"f0": 0.1, "f1": 3.0},
                "prediction": [0.05, 0.9, 0.05],
                "logits": [-1.2, 3.1, -1.0],
                "embedding": [0.2, 0.0, 1.7],
            },
        ],
    },
}

Batch = Annotated[
    list[dict[str, Any]],
    Body(
        min_length=1,
        max_length=MAX_BATCH,
        openapi_examples=EXAMPLES,
        description="Events in the wire format (DESIGN.md), processed in order.",
    ),
]


@router.post("/events", summary="Ingest a batch of events", status_code=status.HTTP_202_ACCEPTED)
def ingest_events(events: Batch, ingestor: IngestorDep) -> EventsAccepted:
    """Validate and process each item exactly like the worker does (write scope).

    Items that are not valid events, or that name a stream that is not registered, go to the dead
    letters (stored with source `http`) and are listed with their index and reason; they never
    stop the other items. The results and the streams' new state are committed together before
    the answer; alarms raised by the batch are returned (and sent to the configured webhooks).
    """
    result = ingestor.ingest(events)
    return EventsAccepted(
        accepted=result.accepted,
        dead_letters=[DeadLetterItem(index=i, reason=r) for i, r in result.dead_letters],
        alarms=[_public(a.to_json()) for a in result.alarms],
    )


def _public(record: dict[str, Any]) -> AlarmPublic:
    return AlarmPublic.model_validate(record)
