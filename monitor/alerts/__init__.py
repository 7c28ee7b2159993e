"""Alert routing and delivery: which alarms go to which receivers (:mod:`.routing`), in which
format (:mod:`.payloads`), delivered at-least-once from the ``alert_outbox`` table
(:mod:`.outbox`). See docs/operations.md, "Alert routing"."""

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
]
