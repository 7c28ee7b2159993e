"""Queries of the service's tables, one module per resource.

Functions named ``*_query`` return ``Select`` statements that callers can extend (extra filters,
``.limit()``, ``func.count()`` over a subquery); the small executors next to them run those
statements. Write executors (stream CRUD, acknowledgement, a delivery's retry) commit their own
transaction. Time ranges are half-open everywhere: ``since`` is inclusive, ``until`` exclusive.

Keyset pages and their signed cursors, and bounded counts, are in :mod:`._paging`; every name is
re-exported here (but :data:`._paging.COUNT_LIMIT`, read through its module), so
``from monitor.db import queries`` reaches all of them.

========================  ==========================================================
module                    resource
========================  ==========================================================
``alarms``                alarms, their revisions, acknowledgement, ``GET /alarms`` pages
``traces``                trace points, paged or downsampled
``ood``                   OOD windows and their flagged events
``performance``           model performance windows
``streams``               registered streams and their versions
``calibration``           a stream's calibration events
``dead_letters``          dead letters
``deliveries``            alert deliveries (the outbox)
``checkpoints``           source offsets and stream checkpoints
``fleets``                fleets
========================  ==========================================================
"""

from __future__ import annotations

from monitor.db.queries._paging import (
    Page,
    bounded_count,
    count,
    decode_cursor,
    encode_cursor,
    set_cursor_key,
)
from monitor.db.queries.alarms import (
    AlarmFilters,
    acknowledge_alarm,
    alarm_count,
    alarm_cursor,
    alarm_cursor_key,
    alarm_json_page,
    alarm_page,
    alarm_revisions_query,
    alarms_query,
    get_alarm,
    list_alarms,
    resolve_alarm_id,
)
from monitor.db.queries.calibration import (
    CALIBRATION_FIELDS,
    calibration_event,
    calibration_query,
    feature_order,
    store_calibration,
)
from monitor.db.queries.checkpoints import (
    checkpoint_query,
    offsets_query,
)
from monitor.db.queries.dead_letters import (
    dead_letter_candidates_query,
    dead_letters_query,
    list_dead_letters,
)
from monitor.db.queries.deliveries import (
    alert_deliveries_query,
    list_alert_deliveries,
    retry_alert_delivery,
)
from monitor.db.queries.fleets import (
    fleets_query,
)
from monitor.db.queries.ood import (
    list_ood_windows,
    ood_flags_query,
    ood_page,
    ood_windows_query,
)
from monitor.db.queries.performance import (
    PERFORMANCE_FIELDS,
    performance_windows,
    performance_windows_query,
)
from monitor.db.queries.streams import (
    create_stream,
    delete_stream,
    get_stream,
    list_streams,
    new_stream_version,
    register_stream,
    streams_query,
    update_stream,
)
from monitor.db.queries.traces import (
    downsampled_trace,
    list_traces,
    trace_json_points,
    traces_query,
)

__all__ = [
    "CALIBRATION_FIELDS",
    "PERFORMANCE_FIELDS",
    "AlarmFilters",
    "Page",
    "acknowledge_alarm",
    "alarm_count",
    "alarm_cursor",
    "alarm_cursor_key",
    "alarm_json_page",
    "alarm_page",
    "alarm_revisions_query",
    "alarms_query",
    "alert_deliveries_query",
    "bounded_count",
    "calibration_event",
    "calibration_query",
    "checkpoint_query",
    "count",
    "create_stream",
    "dead_letter_candidates_query",
    "dead_letters_query",
    "decode_cursor",
    "delete_stream",
    "downsampled_trace",
    "encode_cursor",
    "feature_order",
    "fleets_query",
    "get_alarm",
    "get_stream",
    "list_alarms",
    "list_alert_deliveries",
    "list_dead_letters",
    "list_ood_windows",
    "list_streams",
    "list_traces",
    "new_stream_version",
    "offsets_query",
    "ood_flags_query",
    "ood_page",
    "ood_windows_query",
    "performance_windows",
    "performance_windows_query",
    "register_stream",
    "resolve_alarm_id",
    "retry_alert_delivery",
    "set_cursor_key",
    "store_calibration",
    "streams_query",
    "trace_json_points",
    "traces_query",
    "update_stream",
]
