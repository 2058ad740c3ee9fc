"""`SearchIndex.evaluate`: recall@k of a saved index against exact search over its own vectors, and its costs.

Recall counts ties as equal (`retrieval.index.tuning.recall_at_k`), as tuning does: the recall an
index was tuned to is the recall measured here, and an exact index measures 1.0 on any vectors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from retrieval.errors import UserError
from retrieval.index.build.describe import bytes_per_vector
from retrieval.index.build.sample import SEED
from retrieval.index.manifest import Measured
from retrieval.index.streaming import unit_rows
from retrieval.index.tuning import TUNING_QUERIES, exact_search, measure

if TYPE_CHECKING:
    import faiss

__all__ = ["evaluate_index"]

Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def evaluate_index(
    stored: tuple[np.ndarray, np.ndarray], search: Search, index: faiss.Index, queries: np.ndarray | None, k: int
) -> Measured:
    """Recall@k of `search` against exact search over the `stored` `(ids, vectors)`, latency, QPS, bytes a vector.

    Args:
        stored: `(ids (N,), vectors (N, D))` of the searchable vectors.
        search: the index's `search(queries, k)`.
        index: the FAISS index, for its size.
        queries: `(Q, D)` queries; `None` takes up to 1,000 stored vectors as queries and leaves each
            one's own id out of both result lists (leave-one-out).
        k: the k of k-recall@k.

    Returns:
        See `SearchIndex.evaluate` (without `ntotal` and `kind`).
    """
    ids, vectors = stored
    if len(ids) == 0:
        raise UserError("the index is empty; add vectors before evaluating it")
    if queries is None:
        rng = np.random.default_rng(SEED)
        chosen = np.sort(rng.choice(len(ids), size=min(TUNING_QUERIES, len(ids)), replace=False))
        query_vectors, own = vectors[chosen], ids[chosen]
        true_scores, positions = exact_search(vectors, query_vectors, k + 1)
        true_scores, true_ids = _without_own(true_scores, ids[positions], own, k)

        def leave_one_out(q: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
            scores, found = search(q, width + 1)
            return _without_own(scores, found, own, width) if len(q) == len(own) else (scores, found)

        measured = measure(leave_one_out, query_vectors, true_ids, k, true_scores)
    else:
        query_vectors, _ = unit_rows(queries, "queries", vectors.shape[1])
        true_scores, positions = exact_search(vectors, query_vectors, k)
        measured = measure(search, query_vectors, ids[positions], k, true_scores)
    return Measured.model_validate({**measured.as_dict(), **bytes_per_vector(index)})


def _without_own(scores: np.ndarray, found: np.ndarray, own: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first k `(scores, ids)` of each row of `found` other than that row's `own` id; -1 (no id, score -inf)
    fills short rows."""
    keep = found != own[:, None]
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    first = np.take_along_axis(found, order, axis=1)
    missing = first == own[:, None]
    return np.where(missing, -np.inf, np.take_along_axis(scores, order, axis=1)), np.where(missing, -1, first)
