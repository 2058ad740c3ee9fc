"""A small FAISS index with typed metadata (nulls included), exported to Qdrant's local mode in a temp dir."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrieval.index import SearchIndex, clustered_unit_vectors
from retrieval.vectordb import DatabaseLocation, parse_database_uri
from retrieval.vectordb.upload import export_index

N, DIM = 100, 16  # local mode commits each point on its own: ~10 ms a point on a slow disk


@dataclass
class Exported:
    index_dir: Path
    index: SearchIndex
    vectors: np.ndarray  # (N, DIM) unit rows, id = row
    location: DatabaseLocation


def gallery_metadata(n: int, seed: int = 0) -> dict[str, list[Any]]:
    """Columns of every filterable type: int, float and bool with nulls, and strings."""
    rng = np.random.default_rng(seed)
    price = [None if i % 13 == 0 else 2.5 * float(x) for i, x in enumerate(rng.integers(0, 40, n))]
    return {
        "path": [f"images/{i:04d}.png" for i in range(n)],
        "label": [None if i % 17 == 0 else int(i % 10) for i in range(n)],
        "price": price,
        "shop": [("a", "b", "c", "it's")[int(x)] for x in rng.integers(0, 4, n)],
        "ok": [None if i % 11 == 0 else bool(x) for i, x in enumerate(rng.integers(0, 2, n))],
    }


def save_gallery_index(
    directory: Path, n: int = N, kind: str = "flat", seed: int = 0
) -> tuple[SearchIndex, np.ndarray]:
    """A `kind` index of `n` clustered unit vectors and `gallery_metadata`, saved at `directory`."""
    vectors, _ = clustered_unit_vectors(n, DIM, n_clusters=12, seed=seed)
    index = SearchIndex.build(vectors, gallery_metadata(n, seed), kind=kind, progress=False)
    index.save(directory)
    return index, vectors


def local_collection_uri(folder: Path, collection: str = "gallery") -> str:
    """The local-mode URI of a collection in `folder`."""
    return f"qdrant+local://{folder}?collection={collection}"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Exported:
    root = tmp_path_factory.mktemp("exported")
    index, vectors = save_gallery_index(root / "index")
    location = parse_database_uri(local_collection_uri(root / "db"))
    export_index(root / "index", location, batch_size=64, progress=False)
    return Exported(root / "index", index, vectors, location)


def _snapshot(location: DatabaseLocation) -> dict[str, Any]:
    """Everything a collection holds: its config's vector params, metadata, and every point (id, vector, payload)."""
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(location.path))
    try:
        config = client.get_collection(location.collection).config
        points, offset = [], None
        while True:
            page, offset = client.scroll(
                location.collection, limit=1000, offset=offset, with_payload=True, with_vectors=True
            )
            points.extend(page)
            if offset is None:
                break
    finally:
        client.close()
    return {
        "vectors": config.params.vectors,
        "metadata": config.metadata,
        "points": sorted((int(p.id), tuple(p.vector), p.payload) for p in points),
    }


@pytest.fixture(scope="session")
def build_index():
    """`build_index(directory, n=N, kind="flat", seed=0)` saves an index there: `(SearchIndex, vectors)`."""
    return save_gallery_index


@pytest.fixture(scope="session")
def local_uri():
    """`local_uri(folder, collection="gallery")`: the local-mode URI of a collection in `folder`."""
    return local_collection_uri


@pytest.fixture(scope="session")
def snapshot():
    """`snapshot(location)`: the collection's vector params, metadata and every point, comparable with ==."""
    return _snapshot
