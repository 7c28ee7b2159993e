"""Mahalanobis distance to the nearest class mean (Lee, Lee, Lee & Shin, NeurIPS 2018)."""

from __future__ import annotations

from typing import Self

import numpy as np
from numpy.typing import ArrayLike

from monitor.core.ood._distances import row_products
from monitor.core.ood.base import (
    FloatArray,
    InputKind,
    Scorer,
    as_matrix,
    check_positive,
    check_width,
    default_input,
    fit_standardization,
)


class Mahalanobis(Scorer):
    """Negative squared Mahalanobis distance to the closest class mean, with a shared covariance.

    Lee et al. (2018), eq. (1): class means μ_c and the tied covariance
    Σ = (1/N) Σ_c Σ_{i: y_i = c} (x_i − μ_c)(x_i − μ_c)ᵀ; eq. (2): the score is
    ``max_c −(x − μ_c)ᵀ Σ⁻¹ (x − μ_c)`` (we skip their input pre-processing and layer ensemble).
    Without labels at fit there is one class (the calibration mean). The covariance is
    regularised as Σ + reg·(tr Σ / d)·I so that it is invertible with fewer points than
    dimensions or constant columns.

    Parameters
    ----------
    reg
        Relative ridge added to the covariance (a fraction of its mean eigenvalue), >= 0.
    standardize
        Standardise columns by the calibration mean and standard deviation first (tabular use);
        the ridge then acts on a common scale.
    input_kind
        ``"features"`` or ``"embedding"``; default ``"features"`` when ``standardize`` else
        ``"embedding"``.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> maha = Mahalanobis().fit(rng.normal(size=(500, 4)))
    >>> s = maha.score(np.array([[0.0, 0.0, 0.0, 0.0], [4.0, 0.0, 0.0, 0.0]]))
    >>> bool(s[0] > s[1])
    True

    References
    ----------
    Lee, Lee, Lee, Shin. *A Simple Unified Framework for Detecting Out-of-Distribution Samples
    and Adversarial Attacks.* NeurIPS 2018.
    """

    name = "mahalanobis"
    _fitted = ("center_", "scale_", "whitener_", "means_", "sq_means_")

    def __init__(
        self,
        reg: float = 1e-3,
        standardize: bool = False,
        input_kind: InputKind | None = None,
    ) -> None:
        check_positive("reg", reg, strict=False)
        self.reg = reg
        self.standardize = standardize
        self.input_kind = input_kind
        self.input = default_input(input_kind, standardize)

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Class means (one mean without ``y``) and the regularised shared covariance."""
        data = as_matrix(X)
        labels = np.zeros(data.shape[0], dtype=np.intp) if y is None else _labels(y, data)
        # Centre on the calibration mean first: the score is then exactly translation invariant
        # up to rounding, and the distance expansion below is well conditioned.
        center, scale = fit_standardization(data)
        self.center_ = center
        self.scale_ = scale if self.standardize else np.ones_like(scale)
        Z = (data - self.center_) / self.scale_
        classes, inverse = np.unique(labels, return_inverse=True)
        means = np.stack([Z[inverse == c].mean(axis=0) for c in range(classes.size)])
        resid = Z - means[inverse]
        cov = resid.T @ resid / data.shape[0]
        ridge = self.reg * max(np.trace(cov) / cov.shape[0], 1e-12)
        chol = np.linalg.cholesky(cov + ridge * np.eye(cov.shape[0]))
        # z = L⁻¹ x gives ‖z − m‖² = (x − μ)ᵀ Σ⁻¹ (x − μ); store L⁻ᵀ to whiten rows by a product.
        self.whitener_ = np.linalg.inv(chol).T
        self.means_ = means @ self.whitener_
        self.sq_means_ = np.einsum("ij,ij->i", self.means_, self.means_)
        return self

    def score(self, X: ArrayLike) -> FloatArray:
        """``−min_c (x − μ_c)ᵀ Σ⁻¹ (x − μ_c)`` for each row of ``X``."""
        self._require_fitted()
        data = as_matrix(X)
        check_width(data, self.center_.shape[0])
        Z = ((data - self.center_) / self.scale_) @ self.whitener_
        sq = np.einsum("ij,ij->i", Z, Z)[:, None] - 2.0 * (Z @ self.means_.T) + self.sq_means_
        return -np.maximum(sq.min(axis=1), 0.0)

    def score_rows(self, X: ArrayLike) -> FloatArray:
        """:meth:`score` with the products summed row by row in a fixed order (a row's score
        does not depend on the rows scored with it; see ``Scorer.score_rows``)."""
        self._require_fitted()
        data = as_matrix(X)
        check_width(data, self.center_.shape[0])
        Z = row_products((data - self.center_) / self.scale_, self.whitener_)
        cross = row_products(Z, self.means_.T)
        sq = np.einsum("ij,ij->i", Z, Z)[:, None] - 2.0 * cross + self.sq_means_
        return -np.maximum(sq.min(axis=1), 0.0)


def _labels(y: ArrayLike, X: FloatArray) -> np.ndarray:
    labels = np.asarray(y)
    if labels.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {labels.shape}")
    return labels
