"""Exceptions raised by the source connectors.

Every error a connector raises on purpose derives from :class:`SourceError`, so a caller can
catch one class; the subclasses say what went wrong and what to do about it::

    SourceError                    base class: something about a source failed
    ├── SourceConfigError          the URL or an option cannot be used (also a ValueError)
    ├── SourceUnavailableError     the file is missing, or no Kafka broker answered before the
    │                              start-up deadline (retried with backoff until then)
    ├── UnsupportedCompressionError  a producer compressed with a codec whose Python library is
    │                              not installed (lz4, zstandard, python-snappy)
    ├── PartitionNotAssignedError  seek or commit of a partition this consumer does not own
    ├── OffsetRegressionError      a commit lower than an offset already committed (a bug in the
    │                              caller: committed offsets only ever increase)
    └── OffsetCommitError          the broker refused a commit, usually because the group
                                   rebalanced and the partition now belongs to another member

Exceptions raised by the caller's own ``on_assign`` / ``on_revoke`` callbacks are not wrapped:
they propagate unchanged out of the ``poll`` call during which the rebalance happened.
"""

from __future__ import annotations

__all__ = [
    "OffsetCommitError",
    "OffsetRegressionError",
    "PartitionNotAssignedError",
    "SourceConfigError",
    "SourceError",
    "SourceUnavailableError",
    "UnsupportedCompressionError",
]


class SourceError(Exception):
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
