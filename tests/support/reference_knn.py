"""The KNN score before the in-place selection (commit d8e94db), kept to compare bits."""

from __future__ import annotations

import numpy as np

from monitor.core.ood import KNN

_BLOCK_ELEMENTS = 1 << 22


def reference_knn_score(knn: KNN, X: np.ndarray) -> np.ndarray:
    """KNN.score before the in-place selection (commit d8e94db), kept to compare bits."""
    queries = np.asarray(X, dtype=np.float64)
    queries = knn._transform(queries).astype(knn.dtype)
    out = np.empty(queries.shape[0])
    step = max(1, _BLOCK_ELEMENTS // knn.bank_.shape[0])
    for start in range(0, queries.shape[0], step):
        block = queries[start : start + step]
        sq = block @ knn.bank_.T
        sq *= -2.0
        sq += knn.sq_norms_[None, :]
        kth = np.partition(sq, knn.k - 1, axis=1)[:, knn.k - 1]
        kth += np.einsum("ij,ij->i", block, block)
        out[start : start + step] = np.sqrt(np.maximum(kth, 0.0))
    return -out
