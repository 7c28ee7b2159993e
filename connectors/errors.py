"""Exceptions raised by the source connectors.

Every error a connector raises on purpose derives from :class:`SourceError` (and so from
:class:`monitor.errors.MonitorError`), so a caller can catch one class; the subclasses say what
went wrong and what to do about it (the tree, with when each is raised: :mod:`monitor.errors`).

Exceptions raised by the caller's own ``on_assign`` / ``on_revoke`` callbacks are not wrapped:
they propagate unchanged out of the ``poll`` call during which the rebalance happened.
"""

from __future__ import annotations

from monitor.errors import MonitorError

__all__ = [
    "OffsetCommitError",
    "OffsetRegressionError",
    "PartitionNotAssignedError",
    "SourceConfigError",
    "SourceError",
    "SourceUnavailableError",
    "UnsupportedCompressionError",
]


class SourceError(MonitorError):
    """Base class of every error raised on purpose by :mod:`connectors`."""


class SourceConfigError(SourceError, ValueError):
    """A source URL or option that cannot be used; the message names the valid forms."""


class SourceUnavailableError(SourceError):
    """The source cannot be reached: missing file, or no broker answered before the deadline."""


class UnsupportedCompressionError(SourceError):
    """Records are compressed with a codec that kafka-python cannot decode here."""


class PartitionNotAssignedError(SourceError):
    """A seek or commit names a partition that this consumer does not currently own."""


class OffsetRegressionError(SourceError):
    """A commit would move a partition's committed offset backwards."""


class OffsetCommitError(SourceError):
    """The broker refused to store the committed offsets."""
