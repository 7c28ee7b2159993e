"""Optional numba compilation of the statistical core's inner loops.

The kernels are written in the subset of Python that numba compiles; without numba they run as
plain Python (same results, slower). ``bench/bench_core.py`` reports both speeds. Compiled and
interpreted kernels perform the same IEEE operations in the same order and call the same libm
``log``/``exp``, so the batch paths match the per-event ``update`` paths bit for bit (tested).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

try:  # pragma: no cover - exercised by whichever environment runs the tests
    from numba import njit as _njit

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    HAVE_NUMBA = False


def jit(func: F) -> F:
    """Compile ``func`` with numba (no fastmath: results must equal the interpreted code)."""
    if not HAVE_NUMBA:
        return func
    return _njit(cache=True, nogil=True)(func)  # type: ignore[no-any-return]
