"""Search index: a FAISS index of a trained embedder's vectors, with ids, metadata and a manifest.

Example (a runnable doctest; real use passes a model's gallery embeddings):
    >>> import tempfile
    >>> from retrieval.index import SearchIndex, clustered_unit_vectors
    >>> vectors, labels = clustered_unit_vectors(2_100, dim=32, n_clusters=20, seed=0)
    >>> gallery, queries = vectors[:2_000], vectors[2_000:]
    >>> index = SearchIndex.build(gallery, {"label": labels[:2_000].tolist()}, kind="flat", progress=False)
    >>> scores, ids = index.search(queries, k=10)
    >>> ids.shape, bool(index.metadata_for(ids[0])[0]["label"] == labels[2_000])
    ((100, 10), True)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     index.save(f"{folder}/gallery.index")
    ...     SearchIndex.load(f"{folder}/gallery.index").ntotal
    2000

The names below load on first use (PEP 562): importing a FAISS-free part such as
`retrieval.index.locking` or `retrieval.index.min_score` (the command line's parsers do) does not
import FAISS, numpy and pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from retrieval.index.build.options import IndexBuildOptions
    from retrieval.index.choice import (
        DEFAULT_TARGET_RECALL,
        IndexPlan,
        choose_index,
        parse_memory,
        plan_index,
    )
    from retrieval.index.manifest import IndexManifest
    from retrieval.index.search_index import SearchIndex
    from retrieval.index.synthetic import clustered_unit_vectors
    from retrieval.index.tuning import exact_neighbors, recall_at_k

__all__ = [
    "DEFAULT_TARGET_RECALL",
    "IndexBuildOptions",
    "IndexManifest",
    "IndexPlan",
    "SearchIndex",
    "choose_index",
    "clustered_unit_vectors",
    "exact_neighbors",
    "parse_memory",
    "plan_index",
    "recall_at_k",
]

_HOMES = {
    "DEFAULT_TARGET_RECALL": "choice",
    "IndexBuildOptions": "build.options",
    "IndexManifest": "manifest",
    "IndexPlan": "choice",
    "SearchIndex": "search_index",
    "choose_index": "choice",
    "clustered_unit_vectors": "synthetic",
    "exact_neighbors": "tuning",
    "parse_memory": "choice",
    "plan_index": "choice",
    "recall_at_k": "tuning",
}


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` on first use and keep the value here."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
