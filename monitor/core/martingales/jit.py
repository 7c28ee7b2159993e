"""Optional numba compilation of the statistical core's inner loops.

The kernels are written in the subset of Python that numba compiles; without numba they run as
plain Python (same results, slower). ``bench/bench_core.py`` reports both speeds. Compiled and
interpreted kernels perform the same IEEE operations in the same order and call the same libm
``log``/``exp``, so the batch paths match the per-event ``update`` paths bit for bit (tested).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


def numba_cache_dir() -> str:
    """Where numba keeps compiled kernels: ``NUMBA_CACHE_DIR`` if the user set it, else
    ``$XDG_CACHE_HOME/monitor/numba`` (``~/.cache/monitor/numba``), never beside the modules
    (an installed package's folder may be read-only or shared)."""
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        return chosen
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "monitor" / "numba")


# numba reads NUMBA_CACHE_DIR when it is first imported, so it is set before that import.
os.environ["NUMBA_CACHE_DIR"] = numba_cache_dir()

try:  # pragma: no cover - exercised by whichever environment runs the tests
    from numba import njit as _njit
    from numba import typeof as _typeof

    HAVE_NUMBA = True
    import numba as _numba

    # numba may have been imported (by a dependency) before this module: its cache locator
    # reads the setting when a kernel is cached, so setting it here still takes effect.
    _numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False


def jit(func: F) -> F:
    """Compile ``func`` with numba on first call (no fastmath: results equal the interpreted code).

    Cached on disk (in :func:`numba_cache_dir`, a user cache directory): a
    fresh process, e.g. each worker of a consumer group, loads the kernels in about a second
    instead of compiling them for about ten. numba keys the cache by source file and its
    modification time, so an edited kernel is recompiled.
    """
    if not HAVE_NUMBA:
        return func
    return cast(F, _njit(cache=True, nogil=True)(func))


def compiled_entry(func: F, *example_args: Any) -> F:
    """The machine-code entry of jitted ``func`` for the types of ``example_args``.

    Numba's dispatcher re-derives the type of every argument on every call (about 150-250 ns
    here, as much as a whole per-event kernel); ``Dispatcher.compile(signature)`` returns the
    compiled function for one signature, which unboxes its arguments without that search. The
    caller must always pass arguments of exactly these types (private state arrays and floats).
    Without numba (or with ``NUMBA_DISABLE_JIT=1``), ``func`` itself.
    """
    if not HAVE_NUMBA or not hasattr(func, "compile"):
        return func
    signature = tuple(_typeof(a) for a in example_args)
    return cast(F, func.compile(signature))
