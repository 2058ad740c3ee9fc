"""The kNN graph of an audit: each image's k most similar other images, found with FAISS.

Exact inner-product search (`IndexFlatIP`) up to `EXACT_LIMIT` vectors; above it an inverted
file (`IndexIVFFlat`, about 4 sqrt(N) lists, `nprobe` 32) whose recall `graph_recall` measures
against exact search on a sample. Either scales past scikit-learn's neighbours, which cleanlab
would otherwise build. Rows are searched in blocks with a progress bar; self matches are dropped
wherever they land among ties (an exact duplicate can rank before the image itself).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import faiss
import numpy as np
from scipy.sparse import csr_matrix
from tqdm import tqdm

__all__ = ["EXACT_LIMIT", "KnnGraph", "build_knn_graph", "graph_recall", "index_for"]

EXACT_LIMIT = 100_000  # vectors searched exactly; above, an IVF index (N^2 D flops would take hours on a CPU)
_BLOCK = 8192  # query rows per FAISS call: a progress step, and a bounded (block, N) score buffer for exact search
_NPROBE = 32


@dataclass(frozen=True)
class KnnGraph:
    """Each row's k nearest other rows: `neighbours (N, k)` int64, `scores (N, k)` cosines, most similar first."""

    neighbours: np.ndarray
    scores: np.ndarray
    exact: bool  # exact search, or the IVF approximation

    @property
    def k(self) -> int:
        return int(self.neighbours.shape[1])

    def cleanlab_graph(self) -> csr_matrix:
        """The graph as cleanlab's `knn_graph`: `(N, N)` CSR of Euclidean distances of unit vectors, sorted per row.

        `sqrt(2 - 2 cos)`, so cleanlab's distance-based outlier and duplicate scores see the same order
        as the cosines; a zero distance (an exact duplicate) is stored explicitly, as cleanlab asks.
        """
        n, k = self.neighbours.shape
        distances = np.sqrt(np.clip(2.0 - 2.0 * self.scores.astype(np.float64), 0.0, None))
        return csr_matrix((distances.ravel(), self.neighbours.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))


def build_knn_graph(embeddings: np.ndarray, k: int = 10, progress: bool = True) -> KnnGraph:
    """The kNN graph of `(N, D)` unit embeddings (float32), k < N.

    Raises:
        ValueError: k outside [1, N - 1].
    """
    n = len(embeddings)
    if not 1 <= k < n:
        raise ValueError(f"k must be in [1, N - 1] = [1, {n - 1}], got {k}")
    vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
    index, exact = index_for(vectors)
    neighbours = np.empty((n, k), dtype=np.int64)
    scores = np.empty((n, k), dtype=np.float32)
    for start in tqdm(range(0, n, _BLOCK), desc="kNN graph", unit="block", disable=None if progress else True):
        block = slice(start, min(start + _BLOCK, n))
        found_scores, found = index.search(vectors[block], k + 1)
        neighbours[block], scores[block] = _without_self(found, found_scores, np.arange(start, block.stop), k)
    missing = np.flatnonzero((neighbours < 0).any(axis=1))
    if len(missing):  # an IVF probe that saw fewer than k others: search those rows exactly
        flat = faiss.IndexFlatIP(vectors.shape[1])
        flat.add(vectors)
        found_scores, found = flat.search(vectors[missing], k + 1)
        neighbours[missing], scores[missing] = _without_self(found, found_scores, missing, k)
    return KnnGraph(neighbours, scores, exact)


def graph_recall(graph: KnnGraph, embeddings: np.ndarray, sample: int = 1000, seed: int = 0) -> float:
    """Share of the true k nearest others that `graph` holds, over `sample` random rows (1.0 for an exact graph)."""
    if graph.exact:
        return 1.0
    rows = np.random.default_rng(seed).choice(len(embeddings), size=min(sample, len(embeddings)), replace=False)
    flat = faiss.IndexFlatIP(embeddings.shape[1])
    flat.add(np.ascontiguousarray(embeddings, dtype=np.float32))
    found_scores, found = flat.search(np.ascontiguousarray(embeddings[rows], dtype=np.float32), graph.k + 1)
    truth, _ = _without_self(found, found_scores, rows, graph.k)
    hits = sum(len(set(truth[i]) & set(graph.neighbours[row])) for i, row in enumerate(rows))
    return hits / (len(rows) * graph.k)


def index_for(vectors: np.ndarray) -> tuple[faiss.Index, bool]:
    """A flat index up to `EXACT_LIMIT` rows, else a trained IVF index; both hold every row."""
    n, dim = vectors.shape
    if n <= EXACT_LIMIT:
        flat = faiss.IndexFlatIP(dim)
        flat.add(vectors)
        return flat, True
    lists = int(4 * math.sqrt(n))
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, lists, faiss.METRIC_INNER_PRODUCT)
    sample = np.random.default_rng(0).choice(n, size=min(n, 64 * lists), replace=False)
    ivf.train(vectors[np.sort(sample)])
    ivf.add(vectors)
    ivf.nprobe = _NPROBE
    return ivf, False


def _without_self(found: np.ndarray, scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`(len(rows), k)` neighbours and scores of k + 1 search results without the row itself (else the last)."""
    is_self = found == rows[:, None]
    is_self[~is_self.any(axis=1), -1] = True
    keep = ~is_self
    return found[keep].reshape(len(rows), k), scores[keep].reshape(len(rows), k)
