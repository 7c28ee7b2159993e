"""River's ``StandardScaler | LogisticRegression`` ``learn_one`` arithmetic, compiled.

The density ratio (docs/algorithms.md, Section 4) was trained with river's pipeline one point
at a time; two ``learn_one`` calls per event cost ≈ 25 µs of dict handling. These kernels do the
same IEEE operations in the same order (river 0.26: ``preprocessing.StandardScaler.learn_one`` /
``transform_one``, ``linear_model.base.GLM._fit`` with ``optim.SGD``, ``optim.losses.Log.gradient``,
``utils.math.clamp``) on float arrays, compiled with numba when it is installed. They are
verified equal to river, to 1e-12 relative, on a bundled dataset by
``tests/martingales/test_logistic.py`` — river stays the reference.

Per point x with label y, river does (features in index order):

1. Welford (West 1979): ``n_i += 1; m_i += (x_i − m_old)/n_i;
   v_i += ((x_i − m_old)(x_i − m_i) − v_i)/n_i`` (population variance);
2. ``z_i = (x_i − m_i)/v_i**0.5``, or 0 when ``v_i == 0``;
3. ``g = ∂ log-loss/∂ logit`` at ``logit = Σ_i c_i z_i + b`` (river's branches at |logit| > 18),
   clipped to ±``clip_gradient``;
4. ``b −= intercept_lr · g``, then ``c_i −= lr · (z_i g + l2 c_i)`` (the l2 term only if l2 ≠ 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from monitor.core.martingales.jit import HAVE_NUMBA, jit

CLIP_GRADIENT = 1e12  # river's LogisticRegression default


def _libm_pow(x: float, y: float) -> float:
    """libm's ``pow``: Python's ``float ** float`` calls it; compiled, the overload below does.

    river scales by ``v ** 0.5``; libm's pow is not always correctly rounded (≈ 1 in 1 000
    variances differs from ``sqrt`` by an ulp), and numba would compile ``v ** 0.5`` to
    ``sqrt``. Declared as an external symbol, the compiled call links to the same libm ``pow``
    (and, unlike a ctypes pointer, keeps the kernels cacheable on disk).
    """
    return float(x**y)


if HAVE_NUMBA:
    from numba import types
    from numba.extending import overload

    _C_POW = types.ExternalFunction("pow", types.float64(types.float64, types.float64))

    @overload(_libm_pow)
    def _libm_pow_compiled(x: Any, y: Any) -> Any:
        def impl(x: Any, y: Any) -> Any:  # annotations must equal the typing function's
            return _C_POW(x, y)

        return impl


@jit
def _sqrt_as_river(v: float) -> float:
    return _libm_pow(v, 0.5)


@jit
def _log_loss_gradient(label: bool, y_pred: float) -> float:
    """river ``optim.losses.Log.gradient`` with unit class weights, same branches and ops."""
    if label:
        if y_pred > 18.0:
            return math.exp(-y_pred) * -1.0
        if y_pred < -18.0:
            return -1.0
        return -1.0 / (math.exp(y_pred) + 1.0)
    z = -y_pred
    if z > 18.0:
        return math.exp(-z)
    if z < -18.0:
        return 1.0
    return 1.0 / (math.exp(z) + 1.0)


@jit
def _learn_one(
    x: NDArray[np.float64], label: bool, counts: NDArray[np.int64], means: NDArray[np.float64],
    vars_: NDArray[np.float64], coef: NDArray[np.float64], z: NDArray[np.float64],
    intercept: float, lr: float, intercept_lr: float, l2: float,
) -> float:
    """One river ``learn_one`` of the scaler then the model; returns the new intercept."""
    d = x.size
    for i in range(d):
        counts[i] += 1
        old = means[i]
        means[i] += (x[i] - old) / counts[i]
        vars_[i] += ((x[i] - old) * (x[i] - means[i]) - vars_[i]) / counts[i]
    dot = 0.0
    for i in range(d):
        v = vars_[i]
        z[i] = (x[i] - means[i]) / _sqrt_as_river(v) if v != 0.0 else 0.0
        dot += coef[i] * z[i]
    g = _log_loss_gradient(label, dot + intercept)
    g = max(min(g, CLIP_GRADIENT), -CLIP_GRADIENT)
    intercept = intercept - intercept_lr * g
    for i in range(d):
        gi = z[i] * g
        if l2 != 0.0:
            gi = gi + coef[i] * l2
        coef[i] = coef[i] - gi * lr
    return intercept


@jit
def _learn_pairs(
    targets: NDArray[np.float64], source: NDArray[np.float64], draws: NDArray[np.int64],
    counts: NDArray[np.int64], means: NDArray[np.float64], vars_: NDArray[np.float64],
    coef: NDArray[np.float64], intercept: float, lr: float, intercept_lr: float, l2: float,
) -> float:
    """Each target row (label True), then ``source[draws[t]]`` (label False) if drawn."""
    z = np.empty(targets.shape[1], np.float64)
    for t in range(targets.shape[0]):
        for half in range(2 if t < draws.size else 1):
            # a run-time label: one compiled _learn_one, not one per literal True / False
            is_target = half == 0
            x = targets[t] if is_target else source[draws[t]]
            intercept = _learn_one(x, is_target, counts, means, vars_, coef, z, intercept, lr,
                                   intercept_lr, l2)
    return intercept


class ScaledLogisticSGD:
    """Online standardisation + logistic regression by SGD, arithmetically river's pipeline.

    Equal to ``preprocessing.StandardScaler() | linear_model.LogisticRegression(
    optimizer=optim.SGD(lr), l2=l2, intercept_lr=lr)`` trained with ``learn_one``.
    """

    def __init__(self, n_features: int, lr: float, l2: float) -> None:
        self.lr, self.l2 = float(lr), float(l2)
        self.counts = np.zeros(n_features, np.int64)
        self.means = np.zeros(n_features, np.float64)
        self.vars = np.zeros(n_features, np.float64)
        self.coef = np.zeros(n_features, np.float64)
        self.intercept = 0.0
        self.n_iterations = 0  # river's optimizer step counter (kept for the state)

    def learn_pairs(
        self, targets: NDArray[np.float64], source: NDArray[np.float64], draws: NDArray[np.int64]
    ) -> None:
        """Learn ``targets[t]`` (True), then ``source[draws[t]]`` (False) if ``t < draws.size``."""
        self.intercept = float(_learn_pairs(
            np.ascontiguousarray(targets), source, draws, self.counts, self.means, self.vars,
            self.coef, self.intercept, self.lr, self.lr, self.l2,
        ))
        self.n_iterations += targets.shape[0] + min(draws.size, targets.shape[0])

    def packed(self, clip: tuple[float, float, float, float]) -> NDArray[np.float64]:
        """[intercept, log lo, log hi, lo, hi, means, stds, coefs] for the odds kernels."""
        return _pack(self.intercept, clip, self.means, self.vars, self.coef)


@jit
def _pack(intercept: float, clip: tuple[float, float, float, float], means: NDArray[np.float64],
          vars_: NDArray[np.float64], coef: NDArray[np.float64]) -> NDArray[np.float64]:
    d = means.size
    lin = np.empty(5 + 3 * d, np.float64)
    lin[0], lin[1], lin[2], lin[3], lin[4] = intercept, clip[0], clip[1], clip[2], clip[3]
    for j in range(d):
        lin[5 + j], lin[5 + d + j], lin[5 + 2 * d + j] = means[j], math.sqrt(vars_[j]), coef[j]
    return lin


# ---------------------------------------------------------------- odds w(x) = exp(logit)
# ``lin`` packs the frozen model: [intercept, log lo, log hi, lo, hi, means, stds, coefs].
LIN_HEAD = 5


@jit
def _clipped_exp(logit: float, lin: NDArray[np.float64]) -> float:
    """exp(logit) with the logit clipped to [log lo, log hi]; the bounds are returned exactly."""
    if logit >= lin[2]:
        return float(lin[4])
    if logit <= lin[1]:
        return float(lin[3])
    return math.exp(logit)


@jit
def ratio_of_row(x: NDArray[np.float64], lin: NDArray[np.float64]) -> float:
    """w(x) for one point; NaN if x has the wrong length or a non-finite value."""
    d = (lin.size - LIN_HEAD) // 3
    if x.size != d:
        return math.nan
    logit = lin[0]
    for j in range(d):
        if not math.isfinite(x[j]):
            return math.nan
        sd, c = lin[LIN_HEAD + d + j], lin[LIN_HEAD + 2 * d + j]
        # a constant feature standardises to 0 (river's convention); 0·c keeps -0.0 rules
        logit = logit + (((x[j] - lin[LIN_HEAD + j]) / sd) * c if sd > 0.0 else 0.0 * c)
    return _clipped_exp(logit, lin)


@jit
def logits_of_columns(
    columns: NDArray[np.float64], n: int, lin: NDArray[np.float64], out: NDArray[np.float64]
) -> None:
    """Logits of the first n points of a (d, capacity) feature array, as :func:`ratio_of_row`.

    Feature by feature over contiguous columns (intercept first), so the loop vectorises and
    every point gets the same operations in the same order as the single-point path.
    """
    d = columns.shape[0]
    for i in range(n):
        out[i] = lin[0]
    for j in range(d):
        m, sd, c = lin[LIN_HEAD + j], lin[LIN_HEAD + d + j], lin[LIN_HEAD + 2 * d + j]
        col = columns[j]
        if sd > 0.0:
            for i in range(n):
                out[i] = out[i] + ((col[i] - m) / sd) * c
        else:
            zero = 0.0 * c
            for i in range(n):
                out[i] = out[i] + zero


@jit
def odds_of_logits(logits: NDArray[np.float64], lin: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.empty(logits.size, np.float64)
    for i in range(logits.size):
        out[i] = _clipped_exp(logits[i], lin)
    return out
