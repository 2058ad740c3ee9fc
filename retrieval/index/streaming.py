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
from tqdm.auto import tqdm

from retrieval.errors import UserError

__all__ = ["ADD_CHUNK", "UnitChunks", "VectorStream", "exact_neighbors_streamed", "gather_rows", "unit_rows"]

ADD_CHUNK = 65536  # vectors per `add` call: a progress bar that moves, bounded temporaries


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


def unit_rows(array: np.ndarray, name: str, dim: int | None = None) -> tuple[np.ndarray, bool]:
    """`array` as C-contiguous float32 `(N, D)` unit rows, and whether the rows already were unit."""
    matrix = np.asarray(array)
    if matrix.ndim != 2 or matrix.shape[0] == 0:
        raise UserError(f"{name} must be a non-empty (N, D) array, got shape {matrix.shape}")
    if dim is not None and matrix.shape[1] != dim:
        raise UserError(f"{name} have dimension {matrix.shape[1]}, the index holds {dim}-d vectors")
    if not np.issubdtype(matrix.dtype, np.number):
        raise UserError(f"{name} must be numeric, got dtype {matrix.dtype}")
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    if not np.isfinite(matrix).all():
        raise UserError(f"{name} contain NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1)
    if (norms == 0).any():
        raise UserError(f"{name} row {int(np.argmin(norms))} is all zeros and has no direction")
    were_unit = bool(np.all(np.abs(norms - 1.0) < 1e-3))
    return (matrix if were_unit else matrix / norms[:, None]), were_unit


class UnitChunks:
    """Passes over a `VectorStream` as `(first row, unit rows)` pairs, each chunk checked and L2-normalized."""

    def __init__(self, stream: VectorStream, chunk_rows: int) -> None:
        self._stream, self._chunk_rows = stream, chunk_rows
        self.were_unit = True  # every chunk read so far was already L2-normalized

    def read(self, description: str, progress: bool) -> Iterator[tuple[int, np.ndarray]]:
        """One pass from the first row, with a progress bar; `UserError` if the rows do not number `count`."""
        count, start = self._stream.count, 0
        with tqdm(total=count, desc=description, unit="vec", disable=not progress or count < ADD_CHUNK) as bar:
            for chunk in self._stream.read(self._chunk_rows):
                if start + len(chunk) > count:
                    raise UserError(f"the embeddings hold more than the {count:,} rows their files announce")
                if len(chunk):
                    rows, unit = unit_rows(chunk, f"embeddings (rows {start:,} on)", self._stream.dim)
                    self.were_unit &= unit
                    yield start, rows
                    start += len(rows)
                    bar.update(len(rows))
        if start != count:
            raise UserError(f"the embeddings hold {start:,} rows where their files announce {count:,}")


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
