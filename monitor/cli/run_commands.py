"""``monitor run``: process a source of events."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from monitor.cli.common import alerts_argument, port_number, positive_int, with_alerts
from monitor.settings import Settings


def add_run(sub: Any) -> None:
    p = sub.add_parser(
        "run", help="process a source of events (file to its end; Kafka until stopped)"
    )
    p.add_argument(
        "--source", required=True, help="file:EVENTS.jsonl or kafka://HOST:PORT/TOPIC[,TOPIC]"
    )
    p.add_argument(
        "--config", action="append", default=[], help="stream configuration (repeatable)"
    )
    p.add_argument("--group", default="monitor", help="Kafka consumer group (default: monitor)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object at the end, the run's summary with its alarms, "
                   "instead of a JSON line per alarm as it is stored")
    p.add_argument("--no-store", action="store_true", help="do not persist to the database")
    alerts_argument(p)
    p.add_argument(
        "--batch-size", type=positive_int, default=None, help="records per transaction"
    )
    p.add_argument(
        "--checkpoint-every",
        type=positive_int,
        default=None,
        help="store detector states and offsets every N batches (default: "
        "MONITOR_CHECKPOINT_EVERY or 5; results are stored every batch)",
    )
    p.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        help="serve /healthz and /metrics of this worker on this port (default: "
        "MONITOR_WORKER_METRICS_PORT; off when neither is set)",
    )
    p.set_defaults(handler=_cmd_run)


def _cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from monitor.cli.runs import run_source

    settings = with_alerts(args, settings)
    summary = run_source(
        source_url=args.source,
        configs=args.config,
        group=args.group,
        settings=settings,
        store=not args.no_store,
        batch_size=args.batch_size or settings.batch_size,
        checkpoint_every=args.checkpoint_every or settings.checkpoint_every,
        on_alarm=None if args.json else _print_alarm,
        metrics_port=_metrics_port(args.metrics_port),
        health_bound_s=float(os.environ.get("MONITOR_WORKER_HEALTH_BOUND_S") or 30.0),
    )
    if args.json:
        print(json.dumps(summary.to_json()))
    else:
        summary.print_human(sys.stderr)
    return 0


def _print_alarm(alarm: Any) -> None:
    print(json.dumps(alarm.to_json()), flush=True)


def _metrics_port(given: int | None) -> int | None:
    """``--metrics-port``, else ``MONITOR_WORKER_METRICS_PORT``, else None (no server)."""
    if given is not None:
        return given
    text = os.environ.get("MONITOR_WORKER_METRICS_PORT", "").strip()
    if not text:
        return None
    try:
        return port_number(text)
    except argparse.ArgumentTypeError as exc:
        raise SystemExit(f"monitor: MONITOR_WORKER_METRICS_PORT: {exc}") from None
