"""``POST /events``: batch ingest through the worker's validation and dead-letter path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from fastapi import APIRouter, Body, Header, HTTPException, Request, Security, status

from monitor.api.deps import IngestorDep, bearer
from monitor.api.errors import WRITE_ERRORS, responses
from monitor.api.ingest import ClientGoneError, IdempotencyKeyReusedError, IngestQueueFullError
from monitor.api.schemas import AlarmPublic, DeadLetterItem, ErrorResponse, EventsAccepted

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
        description="Events in the wire format (README \"Event format\"), processed in order.",
    ),
]


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        description="Any string unique per batch: a retry with the same key and body answers "
        "what the first request did and changes nothing (kept for the de-duplication window).",
    ),
]


@router.post(
    "/events",
    summary="Ingest a batch of events",
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        **responses(409),
        429: {
            "model": ErrorResponse,
            "description": "The ingest queue is full: retry after `Retry-After` seconds.",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
    },
)
async def ingest_events(
    request: Request,
    events: Batch,
    ingestor: IngestorDep,
    idempotency_key: IdempotencyKey = None,
) -> EventsAccepted:
    """Validate and process each item exactly like the worker does (write scope).

    Items that are not valid events, or that name a stream that is not registered, go to the dead
    letters (stored with source `http`) and are listed with their index and reason; they never
    stop the other items. The results and the streams' new state are committed together before
    the answer; alarms raised by the batch are returned (and sent to the configured webhooks).

    Idempotent: an item whose `(stream, kind, id)` an earlier request processed is skipped and
    listed in `duplicates`; with an `Idempotency-Key`, a retry answers the first answer. A full
    queue answers 429 with `Retry-After`; a request whose client left while it waited is dropped
    uncommitted.
    """
    try:
        with ingestor.slot():
            loop_gone = _disconnect_probe(request)
            result = await anyio.to_thread.run_sync(
                lambda: ingestor.ingest(events, idempotency_key, loop_gone)
            )
    except IngestQueueFullError as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": str(exc.retry_after)}) from None
    except IdempotencyKeyReusedError as exc:
        raise HTTPException(409, str(exc)) from None
    except ClientGoneError as exc:
        raise HTTPException(499, str(exc)) from None  # nobody reads it
    return EventsAccepted(
        accepted=result.accepted,
        dead_letters=[DeadLetterItem(index=i, reason=r) for i, r in result.dead_letters],
        duplicates=result.duplicates,
        alarms=[_public(a) for a in result.alarm_json],
        replayed=result.replayed,
    )


def _disconnect_probe(request: Request) -> Callable[[], bool]:
    """A callable for the worker thread: has the client disconnected?"""

    def gone() -> bool:
        try:
            return bool(anyio.from_thread.run(request.is_disconnected))
        except RuntimeError:  # no event loop to ask (not expected under a server)
            return False

    return gone


def _public(record: dict[str, Any]) -> AlarmPublic:
    return AlarmPublic.model_validate(record)
