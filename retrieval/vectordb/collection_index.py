"""`CollectionIndex`: search an exported collection with the calls a `SearchIndex` answers.

`search`, `metadata_for`, `reconstruct`, `ids`, `ntotal` and `dim` mean what they mean for a FAISS
index, so the search service runs over either (`retrieval.serve.backend.SearchBackend`). Search
and filtering run in the database; metadata rows are the points' payloads plus their `id`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from retrieval.errors import UserError
from retrieval.index.filter_language import Filter
from retrieval.index.metadata import ID_COLUMN
from retrieval.index.tie_order import ranked
from retrieval.vectordb.qdrant_filters import to_qdrant_filter
from retrieval.vectordb.qdrant_store import QdrantStore
from retrieval.vectordb.record import CollectionRecord, ExportedManifest
from retrieval.vectordb.uri import DatabaseLocation

__all__ = ["CollectionIndex"]


class CollectionIndex:
    """A complete collection written by `retrieval index export`, searched by cosine similarity.

    Open one with `CollectionIndex.open`; `close` releases the client (and a local folder's lock).

    Attributes:
        record: what the export recorded (the index manifest, its version, the metadata schema).
    """

    def __init__(self, store: QdrantStore, record: CollectionRecord) -> None:
        self._store = store
        self.record = record
        self._schema = record.metadata_schema()

    @classmethod
    def open(cls, location: DatabaseLocation) -> CollectionIndex:
        """Open the collection at `location` after checking that an export wrote all of it.

        Raises:
            UserError: the database or collection is missing or unreachable, was not written by
                `index export`, or its export has not finished.
        """
        store = QdrantStore.open(location, must_exist=True)
        try:
            record = store.record()
            if record is None:
                raise UserError(f"{location} was not written by `retrieval index export`; export an index to it")
            if not record.complete:
                raise UserError(f"{location} is only partly exported; run `retrieval index export` again to finish it")
            size = store.vector_size()
            if size != record.dimension:
                raise UserError(f"{location} holds {size}-d vectors, its record says {record.dimension}; export again")
        except UserError:
            store.close()
            raise
        return cls(store, record)

    def close(self) -> None:
        """Release the database client."""
        self._store.close()

    @property
    def dim(self) -> int:
        """Dimension D of the stored vectors."""
        return self.record.dimension

    @property
    def ntotal(self) -> int:
        """Number of points in the collection."""
        return self._store.count()

    @property
    def ids(self) -> np.ndarray:
        """`(ntotal,)` ascending ids of the points."""
        return self._store.ids()

    @property
    def metadata_schema(self) -> pa.Schema:
        """The exported metadata's Arrow schema (`id` and the other columns): what a filter may name."""
        return self._schema

    @property
    def manifest(self) -> ExportedManifest:
        """The exported index's manifest (without its file list and removed ids)."""
        return self.record.manifest

    def search(
        self,
        vectors: np.ndarray,
        k: int = 10,
        filter: Filter | None = None,  # noqa: A002 - the name SearchIndex.search uses
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k most similar points of each query, among those whose metadata passes `filter`.

        Args:
            vectors: `(Q, D)` or `(D,)` queries (any norm: cosine similarity normalizes them).
            k: results per query, >= 1.
            filter: a metadata filter (`retrieval.index.filter_language`), run by the database; None: every point.

        Returns:
            `(scores, ids)` as `SearchIndex.search` returns them: `(Q, k)` float32 cosine
            similarities, best first (equal scores by the smaller id), and `(Q, k)` int64 ids, padded
            with -inf / -1.

        Raises:
            UserError: queries of another dimension or not finite, a bad k, or a filter that does
                not fit the metadata.
        """
        queries = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
        if queries.ndim != 2 or queries.shape[1] != self.dim or not np.isfinite(queries).all():
            raise UserError(f"query vectors must be finite (Q, {self.dim}) arrays, got shape {queries.shape}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise UserError(f"k must be a positive integer, got {k!r}")
        query_filter = to_qdrant_filter(filter, self._schema, self.manifest.next_id) if filter is not None else None
        return ranked(lambda width: self._store.search(queries, width, query_filter), int(k))

    def metadata_for(self, ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """Metadata rows of `ids` as dicts (`id` first, then the payload), in order; `UserError` on an unknown id.

        Dicts, not a record: a payload holds the index's metadata columns, the user's own.
        """
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        return [{ID_COLUMN: int(i), **payload} for i, payload in zip(wanted, self._store.payloads(wanted), strict=True)]

    def reconstruct(self, id: int) -> np.ndarray:  # noqa: A002 - the name SearchIndex.reconstruct uses
        """The stored `(D,)` vector of `id`; `UserError` if it is not in the collection."""
        return self._store.vectors([id])[0]

    def vectors(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """`(N, D)` stored vectors of `ids`, in order, in one request per chunk; `UserError` naming unknown ids."""
        return self._store.vectors(ids)
