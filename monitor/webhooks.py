"""Webhook signatures, under the name the docs used before the layout (issue 25): the home is
:mod:`monitor.alerts.signing`; ``monitor.webhooks.verify(...)`` keeps working for receivers."""

from monitor.alerts.signing import sign, signed_headers, verify

__all__ = ["sign", "signed_headers", "verify"]
