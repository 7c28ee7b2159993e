"""The bundled datasets, under the name the docs used before the layout (issue 25): the home is
:mod:`monitor.ops.datasets`; ``from monitor.datasets import make_stream`` keeps working."""

from monitor.ops.datasets import (
    build_example,
    load_shuttle,
    load_shuttle_regression,
    make_stream,
)

__all__ = ["build_example", "load_shuttle", "load_shuttle_regression", "make_stream"]
