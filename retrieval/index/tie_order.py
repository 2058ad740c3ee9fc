"""One order of search results on every backend: by score, best first, and equal scores by the smaller id.

Equal vectors (the same image indexed twice) score exactly alike, and each backend keeps and orders such
ties its own way (FAISS by its heap, Qdrant by its sort), so the same search could answer different ids
on FAISS and on Qdrant, or return a later copy and drop an earlier one. `ranked` fixes the order: within
an equal score the item indexed first (the smaller id) comes first, also at the k-th place of an exact
search, which is asked once more, for `TIED_PAST_K` more results, when the next one ties with the k-th.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["TIED_PAST_K", "ranked"]

# How many results past the k-th an exact search fetches when the k-th ties with the next: at most this many
# copies of one vector are told apart at the k-th place (a collapsed model, every vector equal, would
# otherwise fetch the whole index).
TIED_PAST_K = 4096

# width -> `(scores, ids)`: `(Q, W)` best first, W <= width when fewer exist, padded with id -1
Search = Callable[[int], tuple[np.ndarray, np.ndarray]]


def ranked(search: Search, k: int, exact: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The top k of each query by score, ties broken by the smaller id.

    Args:
        search: runs the search for a number of results (see `Search`); called with `k + 1`, and once
            more with `k + TIED_PAST_K` when a query's last result ties with its k-th.
        k: results per query.
        exact: whether `search` is exact. An approximate one (a tuned HNSW or IVF index) is called once
            with `k`, the length its recall was tuned and measured for, and its results are only put in
            order: a longer search would return other items than the ones measured.

    Returns:
        `(scores, ids)`: `(Q, k)` scores, best first, and ids, padded with score -inf and id -1.
    """
    width = k + 1 if exact else k
    scores, ids = _fetched(search, width)
    if exact and scores.shape[1] >= width and _tie_runs_past_the_end(scores, ids, k):
        scores, ids = _fetched(search, k + TIED_PAST_K)
    order = np.lexsort((ids, -scores), axis=1)[:, :k]
    scores, ids = np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)
    missing = k - ids.shape[1]
    if missing > 0:
        scores = np.pad(scores, ((0, 0), (0, missing)), constant_values=-np.inf)
        ids = np.pad(ids, ((0, 0), (0, missing)), constant_values=-1)
    return scores, ids


def _fetched(search: Search, width: int) -> tuple[np.ndarray, np.ndarray]:
    """`search(width)` with the padding's scores at -inf, so that it sorts last."""
    scores, ids = search(width)
    return np.where(ids >= 0, scores, -np.inf), ids


def _tie_runs_past_the_end(scores: np.ndarray, ids: np.ndarray, k: int) -> bool:
    """Whether some query's last fetched result is real and ties with its k-th: more tied items may follow."""
    if scores.shape[1] <= k:
        return False
    last, kth = scores[:, -1], scores[:, k - 1]
    return bool(np.any((ids[:, -1] >= 0) & (last == kth)))
