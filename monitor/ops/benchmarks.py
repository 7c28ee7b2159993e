"""``monitor bench``: run the benchmark harness of the source checkout (``bench/harness.py``).

The benchmarks live in ``bench/`` beside the package (they need the test helpers and write
their results to ``bench/results/``), so ``monitor bench`` works from a source checkout:
``monitor bench`` runs every benchmark at full size, writes ``bench/results/*.json`` and
regenerates ``docs/figures/``, the tables of ``docs/benchmarks.md`` and the figures README.md
and ``docs/algorithms.md`` quote; ``monitor bench --quick`` runs the reduced CI sizes into
``bench/results/quick/`` and touches no docs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from monitor.errors import MonitorError
from monitor.settings import Settings

__all__ = ["BenchmarksUnavailable", "bench_dir", "run_benchmarks"]

_MODULE = "monitor_bench_harness"


class BenchmarksUnavailable(MonitorError, RuntimeError):
    """The ``bench/`` folder is not there (an installed package without its source checkout)."""


def bench_dir() -> Path:
    """The ``bench/`` folder of the source checkout this package was imported from.

    Examples
    --------
    >>> bench_dir().name
    'bench'
    """
    return Path(__file__).resolve().parents[2] / "bench"


def _harness() -> ModuleType:
    if _MODULE in sys.modules:
        return sys.modules[_MODULE]
    path = bench_dir() / "harness.py"
    spec = importlib.util.spec_from_file_location(_MODULE, path)
    if not path.exists() or spec is None or spec.loader is None:
        raise BenchmarksUnavailable(
            f"monitor bench needs the source checkout's bench/ folder; {path} does not exist "
            "(clone the repository and install it with `pip install -e .`)"
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


def run_benchmarks(
    settings: Settings, quick: bool = False, as_json: bool = False, out_dir: Path | None = None
) -> int:
    """Run every benchmark; print the figures (JSON with ``as_json``); 0 unless one failed.

    ``settings`` are not needed: the benchmarks create and drop their own databases (a
    temporary SQLite file; a uniquely named PostgreSQL database on the test server,
    ``MONITOR_TEST_POSTGRES_URL``), so ``database_url`` is never written to. ``out_dir``
    overrides the results folder (then the docs are not regenerated).
    """
    del settings
    argv = (["--quick"] if quick else []) + (["--json"] if as_json else [])
    if out_dir is not None:
        argv += ["--out", str(out_dir)]
    return int(_harness().main(argv))
