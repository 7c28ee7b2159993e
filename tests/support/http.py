"""A plain HTTP GET that answers the status and body, errors included."""

from __future__ import annotations

import urllib.error
import urllib.request


def http_get(url: str) -> tuple[int, str]:
    """Status and body of GET ``url``; an HTTP error status is returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
