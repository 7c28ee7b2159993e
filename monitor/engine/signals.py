"""Stopping the worker cleanly: :class:`StopFlag`, set by SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["StopFlag"]

log = logging.getLogger(__name__)


class StopFlag:
    """Set by SIGTERM/SIGINT: the loop finishes its batch, persists, commits and stops."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``, waking early when the flag is set; True if it is set."""
        return self._event.wait(timeout_s)

    def __bool__(self) -> bool:
        return self._event.is_set()

    @contextmanager
    def on_signals(self) -> Iterator[StopFlag]:
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        for sig in previous:
            signal.signal(sig, lambda *_: self._requested())
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _requested(self) -> None:
        log.info("stop requested: finishing the current batch")
        self.set()
