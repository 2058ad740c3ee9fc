"""A built index as the `Gallery` that re-ranking searches (`retrieval.core.rerank`), with the search's filter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from retrieval.index.filter_language import Filter

__all__ = ["IndexGallery"]


class IndexGallery:
    """A `Gallery` over a `SearchIndex` or `CollectionIndex` (their `search(..., filter=)` and `vectors`), filtered."""

    def __init__(self, index: Any, filter: Filter | None = None) -> None:  # noqa: A002 - SearchIndex's name
        self.index, self.filter = index, filter

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(vectors, k, filter=self.filter)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        """Each distinct id fetched once, in one `vectors` call (one request per chunk for a database backend)."""
        found = np.zeros((*ids.shape, self.index.dim), dtype=np.float32)
        valid = ids >= 0
        distinct, where = np.unique(ids[valid], return_inverse=True)
        if len(distinct):
            found[valid] = self.index.vectors(distinct)[where]
        return found
