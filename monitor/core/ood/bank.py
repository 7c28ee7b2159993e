"""A bounded reference bank: a seeded random subsample of at most ``size`` calibration rows.

A kNN score (and the full-conformal p-values built on it) costs one distance per reference row
and event; a bank of at most ``size`` rows bounds that cost whatever the calibration size.
Validity is unchanged: a subsample drawn independently of the values of exchangeable rows is
itself exchangeable with them and with the test points, so the conformal arguments hold with
the bank in place of the whole calibration set (docs/ood.md, docs/detectors.md).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["reference_bank"]


def reference_bank(
    n_rows: int, size: int | None, seed: int | np.random.SeedSequence | None
) -> NDArray[np.intp] | None:
    """The rows (ascending) of a uniform random subsample of ``size`` of ``n_rows`` rows, drawn
    with ``np.random.default_rng(seed)``; None when every row is kept (``size`` None or at
    least ``n_rows``).

    >>> reference_bank(10, 4, seed=0).tolist(), reference_bank(10, 10, seed=0)
    ([2, 4, 5, 7], None)
    """
    if size is None or size >= n_rows:
        return None
    if size < 1:
        raise ValueError(f"a reference bank needs at least 1 row, got size={size}")
    rows = np.random.default_rng(seed).choice(n_rows, size=size, replace=False)
    return np.sort(rows)
