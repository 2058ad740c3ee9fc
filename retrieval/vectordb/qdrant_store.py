"""`QdrantStore`: one Qdrant collection of unit vectors keyed by the index's int64 ids, with payloads and a record.

The same calls work on Qdrant's embedded local mode (a folder) and on a server or cluster by URL
(`qdrant-client` hides the difference). The collection measures cosine similarity, which for the
index's unit vectors is the inner product FAISS ranks by, so scores agree. Client and connection
failures become one-line `UserError`s that name the database.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from retrieval.errors import BackendFailed, UserError
from retrieval.vectordb._qdrant import ApiException, QdrantClient, models
from retrieval.vectordb.record import CollectionRecord
from retrieval.vectordb.uri import DatabaseLocation

__all__ = ["API_KEY_VARIABLE", "QdrantStore"]

API_KEY_VARIABLE = "QDRANT_API_KEY"
_SCROLL_PAGE = 10_000  # ids per scroll request: ids only, so a page is small
_RETRIEVE_CHUNK = 1_000  # points per retrieve request
_TIMEOUT_S = 60
_SQLITE_HEADER = b"SQLite format 3\x00"


class QdrantStore:
    """A Qdrant client bound to one collection. Open with `QdrantStore.open`, use as a context manager."""

    def __init__(self, client: QdrantClient, location: DatabaseLocation) -> None:
        self.client = client
        self.location = location
        self.name = location.collection

    @classmethod
    def open(cls, location: DatabaseLocation, must_exist: bool = False) -> QdrantStore:
        """Connect to the database (a local folder is created unless `must_exist`).

        Raises:
            UserError: the server cannot be reached, the local folder is missing (`must_exist`)
                or open in another process, or (`must_exist`) the collection does not exist.
        """
        if location.path is not None:
            if must_exist and not location.path.is_dir():
                raise UserError(f"no local Qdrant database at {location.path}; export an index there first")
            try:
                client = QdrantClient(path=str(location.path))
            except RuntimeError as exc:  # the folder's lock is held
                raise UserError(
                    f"the local Qdrant database {location.path} is open in another process (local mode allows one "
                    "at a time); stop that process, or use a Qdrant server for shared access"
                ) from exc
            except (sqlite3.DatabaseError, ValueError) as exc:  # a damaged storage.sqlite or meta.json
                raise UserError(
                    f"the local Qdrant database {location.path} is damaged: {_damaged_file(location.path, exc)} "
                    f"cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                    "export the index again into a new folder (retrieval index export --to ...)"
                ) from exc
        else:
            api_key = os.environ.get(API_KEY_VARIABLE) or None
            client = QdrantClient(url=location.url, api_key=api_key, timeout=_TIMEOUT_S, check_compatibility=False)
        store = cls(client, location)
        if must_exist and not store.exists():
            store.close()
            raise UserError(f"{location} does not exist; create it with `retrieval index export --to URI`")
        return store

    def close(self) -> None:
        """Release the client (and a local folder's lock)."""
        self.client.close()

    def __enter__(self) -> QdrantStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the collection ------------------------------------------------------------------------
    def exists(self) -> bool:
        """Whether the collection exists."""
        with self._errors():
            return bool(self.client.collection_exists(self.name))

    def create(self, record: CollectionRecord) -> None:
        """Create the collection for `record.dimension`-d vectors under cosine similarity, holding `record`."""
        params = models.VectorParams(size=record.dimension, distance=models.Distance.COSINE)
        with self._errors():
            self.client.create_collection(self.name, vectors_config=params, metadata=record.to_metadata())

    def drop(self) -> None:
        """Delete the collection and everything in it."""
        with self._errors():
            self.client.delete_collection(self.name)

    def record(self) -> CollectionRecord | None:
        """The export record in the collection's metadata; None for a collection `index export` did not write."""
        with self._errors():
            metadata = self.client.get_collection(self.name).config.metadata
        return CollectionRecord.read(metadata)

    def write_record(self, record: CollectionRecord) -> None:
        """Replace the export record in the collection's metadata."""
        with self._errors():
            self.client.update_collection(self.name, metadata=record.to_metadata())

    def vector_size(self) -> int:
        """The dimension the collection was created with."""
        with self._errors():
            vectors = self.client.get_collection(self.name).config.params.vectors
        if not isinstance(vectors, models.VectorParams):
            raise UserError(f"{self.location} has named vectors; it was not written by `retrieval index export`")
        return int(vectors.size)

    def create_payload_indexes(self, kinds: dict[str, models.PayloadSchemaType]) -> None:
        """Index payload fields on a server, so filtered search stays fast (local mode has no payload indexes)."""
        if self.location.is_local:
            return
        with self._errors():
            for field, kind in kinds.items():
                self.client.create_payload_index(self.name, field, field_schema=kind)

    # -- points --------------------------------------------------------------------------------
    def count(self) -> int:
        """Number of points in the collection."""
        with self._errors():
            return int(self.client.count(self.name, exact=True).count)

    def ids(self) -> np.ndarray:
        """`(N,)` ascending int64 ids of every point (scrolled page by page, ids only)."""
        found: list[int] = []
        offset: Any = None
        with self._errors():
            while True:
                points, offset = self.client.scroll(
                    self.name, limit=_SCROLL_PAGE, offset=offset, with_payload=False, with_vectors=False
                )
                found.extend(int(point.id) for point in points)
                if offset is None:
                    break
        return np.sort(np.asarray(found, dtype=np.int64))

    def upsert(self, ids: np.ndarray, vectors: np.ndarray, payloads: Sequence[dict[str, Any]]) -> None:
        """Write points (an existing id is overwritten); returns once they are stored.

        `payloads` are the points' metadata rows, the user's own columns, passed to Qdrant as they are.
        """
        batch = models.Batch(ids=[int(i) for i in ids], vectors=vectors.tolist(), payloads=list(payloads))
        with self._errors():
            self.client.upsert(self.name, points=batch, wait=True)

    def delete(self, ids: np.ndarray) -> None:
        """Delete the points of `ids`."""
        selector = models.PointIdsList(points=[int(i) for i in ids])
        with self._errors():
            self.client.delete(self.name, points_selector=selector, wait=True)

    def payloads(self, ids: Sequence[int] | np.ndarray) -> list[dict[str, Any]]:
        """The payloads of `ids`, in the order given.

        Raises:
            UserError: naming the ids that are not in the collection.
        """
        return [dict(point.payload or {}) for point in self._retrieve(ids, with_payload=True, with_vectors=False)]

    def vectors(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """`(N, D)` stored vectors of `ids`, in the order given, in as few requests as `payloads` makes.

        Raises:
            UserError: naming the ids that are not in the collection.
        """
        points = self._retrieve(ids, with_payload=False, with_vectors=True)
        return np.asarray([point.vector for point in points], dtype=np.float32).reshape(len(points), -1)

    def _retrieve(self, ids: Sequence[int] | np.ndarray, with_payload: bool, with_vectors: bool) -> list[Any]:
        """The points of `ids`, in order, fetched in chunks of distinct ids; `UserError` naming missing ids."""
        wanted = [int(i) for i in np.asarray(ids, dtype=np.int64).reshape(-1)]
        found: dict[int, Any] = {}
        with self._errors():
            for start in range(0, len(wanted), _RETRIEVE_CHUNK):
                chunk = sorted(set(wanted[start : start + _RETRIEVE_CHUNK]))
                points = self.client.retrieve(
                    self.name, ids=chunk, with_payload=with_payload, with_vectors=with_vectors
                )
                found.update((int(point.id), point) for point in points)
        _check_found(wanted, found)
        return [found[i] for i in wanted]

    def search(
        self, vectors: np.ndarray, k: int, query_filter: models.Filter | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The k most similar points of each query, among those passing `query_filter`.

        Args:
            vectors: `(Q, D)` queries.
            k: results per query.
            query_filter: a Qdrant filter (see `retrieval.vectordb.qdrant_filters`).

        Returns:
            `(scores, ids)`: `(Q, k)` float32 cosine similarities, best first, and `(Q, k)` int64
            ids; fewer than k matches are padded with id -1 and score -inf.
        """
        requests = [
            models.QueryRequest(query=query.tolist(), limit=k, filter=query_filter, with_payload=False)
            for query in vectors
        ]
        with self._errors():
            answers = self.client.query_batch_points(self.name, requests=requests)
        scores = np.full((len(vectors), k), -np.inf, dtype=np.float32)
        ids = np.full((len(vectors), k), -1, dtype=np.int64)
        for row, answer in enumerate(answers):
            for column, point in enumerate(answer.points):
                scores[row, column], ids[row, column] = point.score, int(point.id)
        return scores, ids

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn the client's failures (unreachable server, HTTP errors) into one line naming the database."""
        try:
            yield
        except UserError:
            raise
        except (ApiException, OSError, ValueError) as exc:  # local mode raises ValueError
            reason = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
            raise BackendFailed(f"Qdrant request for {self.location} failed: {reason}") from exc


def _damaged_file(folder: Path, error: Exception) -> Path:
    """The file of a local database the client failed to read: a collection's storage.sqlite without SQLite's
    header, else (a bad page in a well-formed file) the first such file, or meta.json for a JSON error."""
    if not isinstance(error, sqlite3.DatabaseError):
        return folder / "meta.json"
    storages = sorted(folder.glob("collection/*/storage.sqlite"))
    for storage in storages:
        with storage.open("rb") as handle:
            if handle.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                return storage
    return storages[0] if storages else folder


def _check_found(wanted: Sequence[int], found: dict[int, Any]) -> None:
    missing = [i for i in wanted if i not in found]
    if missing:
        shown = ", ".join(str(i) for i in missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise UserError(f"unknown id(s): {shown}; ids come from search results")
