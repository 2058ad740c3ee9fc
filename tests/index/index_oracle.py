"""The numpy brute-force oracle and the sizes the index tests share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

N, DIM, QUERIES = 4000, 32, 200
KINDS = ("flat", "hnsw", "ivf", "ivfpq")


def clustered_data() -> tuple[np.ndarray, np.ndarray]:
    """`(N, DIM)` stored vectors and `(QUERIES, DIM)` held-out queries from the same 40 classes."""
    from retrieval.index import clustered_unit_vectors

    vectors, _ = clustered_unit_vectors(N + QUERIES, DIM, n_clusters=40, seed=3)
    return vectors[:N], vectors[N:]


def brute_force(vectors: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """`(Q, k)` ids of the k largest inner products, by a full numpy sort (the oracle)."""
    scores = queries @ vectors.T
    return ids[np.argsort(-scores, axis=1, kind="stable")[:, :k]]


def overlap(found: np.ndarray, truth: np.ndarray) -> float:
    """k-recall@k by a plain Python loop over rows (independent of `recall_at_k`)."""
    k = truth.shape[1]
    return sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(found, truth, strict=True)) / (k * len(truth))


@contextmanager
def one_faiss_thread_only() -> Iterator[None]:
    """FAISS on one thread inside: on a shared CI core, OpenMP threads spinning against each other make small
    k-means runs tens of times slower; the results do not depend on the thread count."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(threads)
