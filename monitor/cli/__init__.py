"""The ``monitor`` command (:func:`main`; ``monitor --help``) and the commands' logic
(:mod:`monitor.cli.runs`)."""

from monitor.cli.main import main

__all__ = ["main"]
