"""A fitted piecewise-linear shaping function with quantile breakpoints.

The family of shaping functions of Mondal, Jiang & Sundaramoorthi (ICML 2025, arXiv 2506.14194):
their variational information-theoretic loss recovers ReAct/ASH-like shapes under assumptions on
the OOD feature distribution and predicts new piecewise shapes. We do not reproduce their
variational derivation; we fit the slopes of a continuous piecewise-linear function by the simple
criterion documented on :class:`PiecewiseLinear`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.ood.base import FloatArray, check_positive
from monitor.core.ood.shaping import ShapedEnergy


class PiecewiseLinear(ShapedEnergy):
    """Energy after a continuous piecewise-linear shaping g fitted on calibration embeddings.

    Breakpoints t_0 < … < t_{B−1} are the quantiles j/B (j = 0..B−1) of the pooled calibration
    activations; g is the identity below t_0 and has slope s_j on [t_{j−1}, t_j) (the last piece
    is unbounded): ``g(h) = h + Σ_j (s_j − 1)·clip(h − t_{j−1}, 0, t_j − t_{j−1})``, so s = 1 is
    the identity (plain energy).

    Fitting criterion (ours, closed form): with ŷ the unshaped prediction, the logit of ŷ after
    shaping is linear in s, ``w_ŷ·g(h) = w_ŷ·h + Σ_j (s_j − 1)·a_j(h)`` with
    ``a_j(h) = w_ŷ·clip(h − t_{j−1}, 0, t_j − t_{j−1})``. We maximise the ridge-penalised gap
    ``Σ_j (s_j − 1)·d_j − (λ/2)‖s − 1‖²`` where ``d_j = mean_ID a_j − mean_null a_j`` contrasts
    calibration embeddings with a *null* sample that keeps every unit's calibration marginal but
    breaks their joint pattern (each column permuted independently). The solution is
    ``s = 1 + d/λ``; we set λ = max|d|/strength so that slopes lie in [1 − strength,
    1 + strength]. Ranges of activation that carry more class evidence than chance get steeper,
    the others flatter (down to 0 or negative with strength >= 1).

    Parameters
    ----------
    W, b
        Last layer, shapes (C, D) and (C,).
    n_pieces
        Number of pieces B >= 1 (breakpoints at the quantiles j/B of calibration activations).
    strength
        Largest departure of a slope from 1, > 0.
    seed
        Seed of the column permutations of the null sample.
    temperature
        Energy temperature.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> W = rng.normal(size=(3, 16))
    >>> H = np.maximum(rng.normal(size=(300, 16)) + W[rng.integers(0, 3, 300)], 0.0)
    >>> pw = PiecewiseLinear(W, np.zeros(3), n_pieces=4).fit(H)
    >>> pw.slopes_.shape, bool(np.abs(pw.slopes_ - 1).max() <= 1.0 + 1e-12)
    ((4,), True)

    References
    ----------
    Mondal, Jiang, Sundaramoorthi. *A Variational Information Theoretic Approach to
    Out-of-Distribution Detection.* ICML 2025, arXiv 2506.14194.
    """

    name = "piecewise"
    _fitted = ("breakpoints_", "slopes_")

    def __init__(
        self,
        W: ArrayLike,
        b: ArrayLike,
        n_pieces: int = 8,
        strength: float = 1.0,
        seed: int = 0,
        temperature: float = 1.0,
    ) -> None:
        super().__init__(W, b, temperature)
        if isinstance(n_pieces, bool) or not isinstance(n_pieces, int | np.integer) or n_pieces < 1:
            raise ValueError(f"n_pieces must be an integer >= 1, got {n_pieces!r}")
        check_positive("strength", strength)
        self.n_pieces = n_pieces
        self.strength = strength
        self.seed = seed

    def _fit_shaping(self, H: FloatArray) -> None:
        self.breakpoints_ = np.quantile(H, np.arange(self.n_pieces) / self.n_pieces)
        rng = np.random.default_rng(self.seed)
        null = np.column_stack([rng.permutation(col) for col in H.T])
        gap = self._class_evidence(H) - self._class_evidence(null)
        scale = np.abs(gap).max()
        step = self.strength * gap / scale if scale > 0 else np.zeros_like(gap)
        self.slopes_ = 1.0 + step

    def shape(self, H: FloatArray) -> FloatArray:
        """``h + Σ_j (s_j − 1)·clip(h − t_{j−1}, 0, t_j − t_{j−1})`` element-wise."""
        out = H.copy()
        for j, piece in enumerate(self._pieces(H)):
            out += (self.slopes_[j] - 1.0) * piece
        return out

    def _pieces(self, H: FloatArray) -> list[FloatArray]:
        widths = np.append(np.diff(self.breakpoints_), np.inf)
        return [np.clip(H - t, 0.0, w) for t, w in zip(self.breakpoints_, widths, strict=True)]

    def _class_evidence(self, H: FloatArray) -> FloatArray:
        """mean over rows of a_j(h) = w_ŷ · piece_j(h), for each piece j."""
        W = np.asarray(self.W, dtype=np.float64)
        w_pred = W[np.argmax(H @ W.T + np.asarray(self.b, dtype=np.float64), axis=1)]
        return np.array([np.mean(np.sum(w_pred * piece, axis=1)) for piece in self._pieces(H)])
