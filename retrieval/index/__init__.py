"""Search index: a FAISS index of a trained embedder's vectors, with ids, metadata and a manifest.

Example (a runnable doctest; real use passes a model's gallery embeddings):
    >>> import tempfile
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
"""

from retrieval.index.choice import IndexKind, IndexPlan, choose_index, parse_memory, plan_index
from retrieval.index.search_index import DEFAULT_TARGET_RECALL, SearchIndex
from retrieval.index.synthetic import clustered_unit_vectors
from retrieval.index.tuning import exact_neighbors, recall_at_k

__all__ = [
    "DEFAULT_TARGET_RECALL",
    "IndexKind",
    "IndexPlan",
    "SearchIndex",
    "choose_index",
    "clustered_unit_vectors",
    "exact_neighbors",
    "parse_memory",
    "plan_index",
    "recall_at_k",
]
