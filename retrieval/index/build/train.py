"""The train phase of a build: the empty FAISS index of a plan, trained on the sample (or a shard's copy)."""

from __future__ import annotations

import faiss
import numpy as np

from retrieval.index.choice import IndexPlan
from retrieval.index.tuning import find_index

__all__ = ["trained_index"]


def trained_index(plan: IndexPlan, dim: int, training_vectors: np.ndarray, trained: faiss.Index | None) -> faiss.Index:
    """An empty index of `plan`'s factory, trained on `training_vectors` `(M, D)`; a copy of `trained` when given.

    HNSW's construction depth is set before anything is added, since it shapes the graph.
    """
    if trained is None:
        index = faiss.index_factory(dim, plan.factory, faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.clone_index(trained)
    graph = find_index(index, faiss.IndexHNSW)
    if graph is not None and "ef_construction" in plan.parameters:
        graph.hnsw.efConstruction = plan.parameters["ef_construction"]
    if plan.trained and trained is None:
        index.train(training_vectors)
    return index
