"""Optional numba compilation of the statistical core's inner loops.

The kernels are written in the subset of Python that numba compiles; without numba they run as
plain Python (same results, slower). ``bench/bench_core.py`` reports both speeds. Compiled and
interpreted kernels perform the same IEEE operations in the same order and call the same libm
``log``/``exp``, so the batch paths match the per-event ``update`` paths bit for bit (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

try:  # pragma: no cover - exercised by whichever environment runs the tests
    from numba import njit as _njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False


def jit(func: F) -> F:
    """Compile ``func`` with numba on first call (no fastmath: results equal the interpreted code).

    No on-disk cache: numba keys its cache by file but rebuilds by module name, which breaks
    when the same file is imported under two names (pytest doctest collection does that).
    """
    if not HAVE_NUMBA:
        return func
    return cast(F, _njit(cache=False, nogil=True)(func))
