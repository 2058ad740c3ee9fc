"""What the search service needs of an index, so one `Searcher` serves a FAISS index or a vector database.

`SearchIndex` (a FAISS index directory, followed by `LiveIndex`) and
`retrieval.vectordb.CollectionIndex` (a Qdrant collection, which the database keeps current, so its
view is fixed) both satisfy `SearchBackend`.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

import numpy as np

from retrieval.index.query import Searchable

__all__ = ["FixedView", "SearchBackend", "Views"]

View = TypeVar("View")
_View_co = TypeVar("_View_co", covariant=True)


class SearchBackend(Searchable, Protocol):
    """Search by inner product (cosine similarity of unit vectors) over vectors with int64 ids and metadata rows:
    the query pipeline's `Searchable` (search, metadata rows), and the size, the ids and the stored vectors."""

    @property
    def dim(self) -> int:
        """Dimension D of the stored vectors."""
        ...

    @property
    def ntotal(self) -> int:
        """Number of searchable vectors."""
        ...

    @property
    def ids(self) -> np.ndarray:
        """`(ntotal,)` ascending ids."""
        ...

    def reconstruct(self, id: int) -> np.ndarray:  # noqa: A002 - SearchIndex's name
        """The stored `(D,)` vector of `id`; `UserError` if unknown."""
        ...


class Views(Protocol[_View_co]):
    """A source of the view to answer one request with (`LiveIndex`, `FixedView`)."""

    def current(self) -> _View_co:
        """The view for the request starting now."""
        ...


class FixedView(Generic[View]):
    """Always the same view: for a backend that stays current by itself."""

    def __init__(self, view: View) -> None:
        self._view = view

    def current(self) -> View:
        """The view."""
        return self._view
