"""Alert routing and delivery: which alarms go to which receivers (:mod:`.routing`), in which
format (:mod:`.payloads`), delivered at-least-once from the ``alert_outbox`` table
(:mod:`.outbox`), each attempt signed (:mod:`.signing`) and retried (:mod:`.delivery`, which
also holds the in-memory delivery of runs without a database). See docs/operations.md, "Alert
routing"."""

from monitor.alerts.outbox import AlertDelivery, outbox_rows
from monitor.alerts.payloads import render
from monitor.alerts.routing import (
    SEVERITY_OF_KIND,
    AlertRouting,
    AlertRoutingError,
    Delivery,
    Receiver,
    Route,
    Severity,
    load_alert_routing,
    routing_from_settings,
)
from monitor.alerts.signing import sign, verify

__all__ = [
    "SEVERITY_OF_KIND",
    "AlertDelivery",
    "AlertRouting",
    "AlertRoutingError",
    "Delivery",
    "Receiver",
    "Route",
    "Severity",
    "load_alert_routing",
    "outbox_rows",
    "render",
    "routing_from_settings",
    "sign",
    "verify",
]
