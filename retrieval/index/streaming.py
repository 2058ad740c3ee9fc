"""Vectors read in chunks, pass after pass: how an index is built from more rows than fit in memory.

A `VectorStream` is N rows of dimension D that can be read again from the start, in the same
order each time, a chunk of rows at a time: an in-memory array (`VectorStream.of_array`), a
memory-mapped `.npy`, parquet row groups (`retrieval.index.from_embeddings`). Building an index
reads it twice: once to gather the rows it samples (training vectors, held-out queries), once to
add every row, so peak memory is the index, the samples and one chunk, whatever N is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import faiss
import numpy as np

__all__ = ["VectorStream", "exact_neighbors_streamed", "gather_rows"]


@dataclass(frozen=True)
class VectorStream:
    """N rows of D-dimensional vectors, read from the start in chunks of up to `chunk_rows` rows per call of `read`.

    Attributes:
        count: N, the number of rows every pass yields.
        dim: D.
        read: `read(chunk_rows)` starts a pass: an iterator of `(rows, D)` arrays, in the same order every pass.
    """

    count: int
    dim: int
    read: Callable[[int], Iterator[np.ndarray]]

    @classmethod
    def of_array(cls, array: np.ndarray) -> VectorStream:
        """The rows of an `(N, D)` array (or a `np.memmap`), as views: nothing is copied."""

        def read(chunk_rows: int) -> Iterator[np.ndarray]:
            for start in range(0, len(array), chunk_rows):
                yield array[start : start + chunk_rows]

        return cls(count=int(array.shape[0]), dim=int(array.shape[1]), read=read)


def gather_rows(chunks: Iterable[tuple[int, np.ndarray]], wanted: np.ndarray, dim: int) -> np.ndarray:
    """The rows at positions `wanted` `(M,)` (any order, repeats allowed), from one pass of `(start, chunk)` pairs.

    Returns:
        `(M, D)` float32 rows, row i being the row at position `wanted[i]`.
    """
    order = np.argsort(wanted, kind="stable")
    positions = wanted[order]
    rows = np.empty((len(wanted), dim), dtype=np.float32)
    for start, chunk in chunks:
        low, high = np.searchsorted(positions, [start, start + len(chunk)])
        rows[order[low:high]] = chunk[positions[low:high] - start]
    return rows


def exact_neighbors_streamed(
    chunks: Iterable[tuple[np.ndarray, np.ndarray]], queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k by inner product of `queries` `(Q, D)` over `(ids (n,), vectors (n, D))` chunks, one chunk in memory.

    Each chunk is searched with FAISS's brute-force `knn` and merged into FAISS's `ResultHeap`.

    Returns:
        `(scores, ids)`: `(Q, k)` each, best first; id -1 (score -inf) where fewer than k rows were seen.
    """
    heap = faiss.ResultHeap(len(queries), k, keep_max=True)
    for ids, vectors in chunks:
        if len(ids):
            scores, positions = faiss.knn(queries, vectors, min(k, len(ids)), metric=faiss.METRIC_INNER_PRODUCT)
            heap.add_result(scores, np.where(positions >= 0, ids[positions], -1))
    heap.finalize()
    return heap.D, heap.I
