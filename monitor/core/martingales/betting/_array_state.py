"""Plumbing shared by the betting functions whose whole state is one float array.

The Jumper mixtures, aGRAPA and plug-in power each keep their bettors' state in one float64
array that a compiled kernel steps in place (one array is one argument of the compiled step:
each argument costs ~100 ns of unboxing per call). What differs is the kernel and the layout;
binding the kernel, reading a block of K values, the batch path and pickling are here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.core.martingales.betting.base import BettingFunction, check_p, check_ps


class ArrayStateBetting(BettingFunction):
    """A mixture of K bettors whose state array is stepped by a compiled kernel.

    Subclasses name their kernel (:meth:`_step_entry`, :meth:`_path`) and their number of
    bettors (:meth:`_width`); the array's blocks of K values come first, log S last.
    """

    _state: NDArray[np.float64]

    def _step_entry(self) -> Callable[[NDArray[np.float64], float], float]:
        """The compiled one-step kernel (state, p) -> new log S."""
        raise NotImplementedError

    def _path(self, ps: NDArray[np.float64]) -> NDArray[np.float64]:
        """The compiled kernel's log-capital path over ``ps`` (steps ``self._state``)."""
        raise NotImplementedError

    def _width(self) -> int:
        """K, the number of bettors (the length of each block)."""
        raise NotImplementedError

    def _set_state(self, values: list[float], log_s: float) -> None:
        self._state = np.array(values, np.float64)
        self._log_s = log_s
        self._step = partial(self._step_entry(), self._state)

    def _block(self, block: int) -> list[float]:
        n = self._width()
        return self._state[block * n : (block + 1) * n].tolist()

    def update(self, p: float) -> None:
        if not 0.0 <= p <= 1.0:  # NaN fails too
            check_p(p)
        self._log_s = self._step(p)

    def update_many(self, ps: ArrayLike) -> NDArray[np.float64]:
        out = self._path(check_ps(ps))
        self._log_s = float(self._state[-1])
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_step"}  # does not pickle

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._step = partial(self._step_entry(), self._state)
