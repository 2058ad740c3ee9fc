"""`export_index`: copy an index's vectors, ids and metadata into a vector database collection.

The collection mirrors the index: one point per searchable vector, the index id as point id, the
vector as stored in the index (exact for every kind), the metadata row (without `id`) as payload.
An export is idempotent and resumable without a progress file: it lists the ids already in the
collection, writes only the missing ones and deletes the ones the index no longer holds. Within one
index lineage (same build, any `add`/`remove` since) an id is never reused and its vector and
metadata never change, so a point already there is already right; a collection of another index
is refused unless `recreate`. The record in the collection's metadata says `complete: false` from
the first write to the last, so a server never serves a half-exported collection unknowingly.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.index.metadata import ID_COLUMN
from retrieval.index.metadata_types import check_metadata
from retrieval.vectordb import DEFAULT_BATCH_SIZE
from retrieval.vectordb.qdrant_filters import check_payload_keys, payload_index_kinds
from retrieval.vectordb.qdrant_store import QdrantStore
from retrieval.vectordb.record import CollectionRecord, export_record
from retrieval.vectordb.uri import DatabaseLocation

__all__ = ["ExportSummary", "export_index", "index_version"]


@dataclass(frozen=True)
class ExportSummary:
    """What one export did.

    Attributes:
        location: the collection written.
        vectors: points in the collection afterwards (the index's searchable vectors).
        written: points this run wrote.
        kept: points already there (a repeated or resumed export).
        deleted: points removed because the index no longer holds their ids.
    """

    location: DatabaseLocation
    vectors: int
    written: int
    kept: int
    deleted: int


def export_index(
    index_dir: str | Path,
    location: DatabaseLocation,
    batch_size: int = DEFAULT_BATCH_SIZE,
    recreate: bool = False,
    progress: bool = True,
) -> ExportSummary:
    """Make the collection at `location` hold exactly the index in `index_dir`.

    Args:
        index_dir: a directory written by `retrieval index build`.
        location: the collection (created if missing).
        batch_size: points per upsert request.
        recreate: delete the collection first, also when it holds another index.
        progress: show a progress bar.

    Raises:
        UserError: the index cannot be loaded, has a metadata column a Qdrant filter cannot name
            (`check_payload_keys`) or of a type an index does not store (`check_metadata`), the collection
            holds something else (without `recreate`), or the database refuses a request.
    """
    if batch_size < 1:
        raise UserError(f"batch size must be >= 1, got {batch_size}")
    index = SearchIndex.load(index_dir, mmap=True)
    check_payload_keys(index.metadata_schema)  # before the collection is touched
    check_metadata(index.metadata_table, f"index {index_dir}")  # an earlier version built it with any type
    ids, vectors = index.all_vectors()
    record = export_record(index.manifest, index_version(index.manifest.as_dict()), index.metadata_schema)
    with QdrantStore.open(location) as store:
        present = _prepared(store, record, recreate)
        stale = np.setdiff1d(present, ids, assume_unique=True)
        missing = np.flatnonzero(~np.isin(ids, present, assume_unique=True))
        if len(stale) or len(missing) or store.record() != record.finished():
            store.write_record(record)  # incomplete until the last point is in
            if len(stale):
                store.delete(stale)
            store.create_payload_indexes(payload_index_kinds(index.metadata_schema))
            _upsert(store, index, ids[missing], vectors[missing], batch_size, len(ids), progress)
            store.write_record(record.finished())
    return ExportSummary(location, len(ids), len(missing), len(ids) - len(missing), len(stale))


def index_version(manifest: Mapping[str, object]) -> str:
    """sha256 of the manifest's canonical JSON: it lists every file's checksum, so any saved change changes it."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def _prepared(store: QdrantStore, record: CollectionRecord, recreate: bool) -> np.ndarray:
    """Create the collection or check that it holds this index's lineage; returns the ids already in it."""
    if recreate and store.exists():
        store.drop()
    if not store.exists():
        store.create(record)
        return np.zeros(0, dtype=np.int64)
    existing = store.record()
    if existing is None:
        raise UserError(
            f"{store.location} exists but was not written by `retrieval index export`; "
            "export to another collection, or pass --recreate to replace it"
        )
    if existing.lineage != record.lineage or store.vector_size() != record.dimension:
        built = existing.manifest.created
        raise UserError(
            f"{store.location} holds another index (built {built}, {existing.dimension}-d); "
            "export to another collection, or pass --recreate to replace it"
        )
    return store.ids()


def _upsert(
    store: QdrantStore,
    index: SearchIndex,
    ids: np.ndarray,
    vectors: np.ndarray,
    batch_size: int,
    total: int,
    progress: bool,
) -> None:
    with tqdm(total=total, initial=total - len(ids), desc="exporting", unit="vec", disable=not progress) as bar:
        for start in range(0, len(ids), batch_size):
            batch = ids[start : start + batch_size]
            payloads = [{k: v for k, v in row.items() if k != ID_COLUMN} for row in index.metadata_for(batch)]
            store.upsert(batch, vectors[start : start + batch_size], payloads)
            bar.update(len(batch))
