"""Search index: a FAISS index of a trained embedder's vectors, with ids, metadata and a manifest.

>>> index = SearchIndex.build(embeddings, {"path": paths, "label": labels}, target_recall=0.95)
>>> scores, ids = index.search(query_embeddings, k=10)
>>> index.metadata_for(ids[0])          # [{"id": 17, "path": ..., "label": ...}, ...]
>>> index.save("gallery.index"); index = SearchIndex.load("gallery.index")
"""

from retrieval.index.choice import IndexKind, IndexPlan, choose_index, parse_memory, plan_index
from retrieval.index.search_index import SearchIndex
from retrieval.index.synthetic import clustered_unit_vectors
from retrieval.index.tuning import exact_neighbors, recall_at_k

__all__ = [
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
