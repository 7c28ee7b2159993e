"""The queries under the name the docs used before the layout (issue 25): the home is
:mod:`monitor.db.queries`, one module per resource; ``monitor.db.repositories.performance_windows``
(docs/explain.md before) and the other names keep working."""

from monitor.db.models import source_key
from monitor.db.queries import *  # noqa: F403
from monitor.db.queries import __all__ as _QUERIES

__all__ = [*_QUERIES, "source_key"]
