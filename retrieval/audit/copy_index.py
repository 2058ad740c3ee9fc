"""The copy check's index and graph: each picture's descriptors stored once, searched exactly or, past a limit, coded.

Up to `EXACT_LIMIT` descriptors (3,846 images of 26) are kept as float32 in an exact `IndexFlatIP`.
Past it they would take 6.7 GB at a million images, twice over (an array and FAISS's copy: most of the
audit's 18 GiB, docs/audit.md), so they are stored as they are read, as float16 in an
`IndexScalarQuantizer`, and searched through an inverted file of 4-bit product-quantizer codes
(`IndexIVFPQFastScan`, 16 bytes a descriptor) whose `_K_FACTOR` times more candidates are re-scored on
the float16 store (`IndexRefine`); the ratio rule reads the kept ones' cosines of float16 descriptors
scaled back to unit length (`_unit_cosines`), which a near-identical copy's tiny distance needs.
Only the pictures whose neighbours are read are searched (`copy_graph`'s `searched`): the ratio rule
reads no training image's. The inverted file's list count balances its two costs, assigning every
descriptor to a list and scanning `_NPROBE` lists a searched picture.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import faiss
import numpy as np

from retrieval.audit.copies import DESCRIPTORS_PER_IMAGE, SIZE, Described
from retrieval.audit.knn_graph import EXACT_LIMIT, KnnGraph

__all__ = ["CopyIndex", "copy_graph", "copy_index"]

_DIM = SIZE * SIZE
_CHUNK = 1 << 16  # descriptors handed to FAISS at once: a 16 MiB buffer
_BLOCK = 2048  # pictures searched per FAISS call: bounded result buffers (a 150 MB block of decoded candidates)
_NPROBE = 32  # inverted lists scanned a search
_K_FACTOR = 16  # candidates a result re-scored on the float16 store
_PQ_PARTS = 32  # product-quantizer sub-vectors of 2 dimensions, 4 bits each: 16 bytes a descriptor
_TRAINING = 64  # training descriptors a list


@dataclass(frozen=True)
class CopyIndex:
    """Every picture's descriptors in one FAISS store, and which catalogue rows show which picture."""

    pictures: np.ndarray  # (N,) int64 the picture each catalogue row shows, numbered in row order; -1 unreadable
    rows: np.ndarray  # (P,) int64 each picture's first row, ascending: the row standing for it in the graph
    offsets: (
        np.ndarray
    )  # (P + 1,) int64: picture p's are store rows offsets[p] to offsets[p + 1], whole thumbnail first
    store: faiss.Index  # IndexFlatIP (exact, float32) or IndexScalarQuantizer (float16)

    @property
    def exact(self) -> bool:
        """Whether the store holds the descriptors exactly (and is searched exhaustively)."""
        return isinstance(self.store, faiss.IndexFlat)


def copy_index(described: Iterable[Described | None], exact_limit: int = EXACT_LIMIT) -> CopyIndex:
    """The index of `describe_images`' stream (None: an unreadable row): each picture's descriptors from its first row.

    Rows show one picture when their `Described.key` is the same. Descriptors go to FAISS in chunks as they come,
    float32 while there are at most `exact_limit` of them, float16 from then on.
    """
    store = _Store(exact_limit)
    pictures, rows, offsets = array("q"), array("q"), array("q", [0])
    seen: dict[bytes, int] = {}
    for row, item in enumerate(described):
        if item is None:
            pictures.append(-1)
            continue
        picture = seen.setdefault(item.key, len(seen))
        pictures.append(picture)
        if picture == len(rows):  # its first row
            rows.append(row)
            store.add(item.descriptors)
            offsets.append(offsets[-1] + len(item.descriptors))
    as_int = np.array
    return CopyIndex(as_int(pictures, np.int64), as_int(rows, np.int64), as_int(offsets, np.int64), store.done())


def copy_graph(index: CopyIndex, k: int, searched: np.ndarray | None = None) -> KnnGraph:
    """Each catalogue row's k most similar other pictures (their first rows), by descriptor: the best of their crops.

    Only the `searched` pictures (indices into `index.rows`; None: all) are searched, each by its whole thumbnail, on
    its first row. Other rows, and those with fewer than k others found, are padded with neighbour -1, score -1.
    """
    n = len(index.pictures)
    neighbours = np.full((n, k), -1, dtype=np.int64)
    scores = np.full((n, k), -1.0, dtype=np.float32)
    chosen = np.arange(len(index.rows)) if searched is None else np.asarray(searched, dtype=np.int64)
    if len(index.rows) < 2 or not len(chosen):
        return KnnGraph(neighbours, scores, index.exact)
    searcher = index.store if index.exact else _coded_search(index.store, len(chosen))
    # Room for k + 1 images' every descriptor: the picture's own and its neighbours' crops crowd the list.
    width = min(index.store.ntotal, DESCRIPTORS_PER_IMAGE * (k + 1))
    for start in range(0, len(chosen), _BLOCK):
        block = chosen[start : start + _BLOCK]
        queries = index.store.reconstruct_batch(index.offsets[block])
        found_scores, found = searcher.search(queries, width)
        if not index.exact:
            found_scores, found = _unit_cosines(index.store, queries, found)
        owners = index.rows[np.searchsorted(index.offsets, found, side="right") - 1]
        rows = index.rows[block]
        valid = (found >= 0) & (owners != rows[:, None])
        first = _first_of_each(np.where(valid, owners, -1)) & valid  # each image's first hit is its best descriptor
        place = np.cumsum(first, axis=1) - 1
        at, hit = np.nonzero(first & (place < k))
        neighbours[rows[at], place[at, hit]] = owners[at, hit]
        scores[rows[at], place[at, hit]] = found_scores[at, hit]
    return KnnGraph(neighbours, scores, index.exact)


def _unit_cosines(store: faiss.Index, queries: np.ndarray, found: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`found`'s cosines to `queries` with both decoded from float16 and scaled back to unit length, most similar
    first (-1 hits last).

    float16 moves a descriptor's length by about 1e-4, as much as 1 - cosine of a near-identical copy (0.99996: a
    distance of 0.009, whose ratio the raw float16 product tripled on Fashion-MNIST); scaled back to unit length
    the error shrinks with the distance itself.
    """
    queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    vectors = store.reconstruct_batch(np.maximum(found, 0).ravel()).reshape(*found.shape, -1)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=2, keepdims=True), 1e-12)
    cosines = np.where(found >= 0, np.einsum("bd,bwd->bw", queries, vectors), -np.inf)
    order = np.argsort(-cosines, axis=1, kind="stable")
    return np.take_along_axis(cosines, order, axis=1).astype(np.float32), np.take_along_axis(found, order, axis=1)


def _first_of_each(values: np.ndarray) -> np.ndarray:
    """`(B, W)` bool: where each value appears first in its row."""
    order = np.argsort(values, axis=1, kind="stable")
    ordered = np.take_along_axis(values, order, axis=1)
    starts = np.ones_like(ordered, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    first = np.empty_like(starts)
    np.put_along_axis(first, order, starts, axis=1)
    return first


class _Store:
    """Descriptors gathered into chunks for FAISS: an exact `IndexFlatIP` until more than `limit`, then float16."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.index: faiss.Index = faiss.IndexFlatIP(_DIM)
        self.pending = np.empty((_CHUNK, _DIM), dtype=np.float32)
        self.filled = 0

    def add(self, descriptors: np.ndarray) -> None:
        if self.filled + len(descriptors) > _CHUNK:
            self._flush()
        self.pending[self.filled : self.filled + len(descriptors)] = descriptors
        self.filled += len(descriptors)

    def done(self) -> faiss.Index:
        """The store, every descriptor added."""
        self._flush()
        self.pending = np.empty((0, _DIM), dtype=np.float32)
        return self.index

    def _flush(self) -> None:
        if isinstance(self.index, faiss.IndexFlat) and self.index.ntotal + self.filled > self.limit:
            coded = faiss.IndexScalarQuantizer(_DIM, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
            coded.add(self.index.reconstruct_n(0, self.index.ntotal))
            self.index = coded
        self.index.add(self.pending[: self.filled])
        self.filled = 0


def _coded_search(store: faiss.Index, queries: int) -> faiss.Index:
    """`store` searched through an inverted file of product-quantizer codes, its candidates re-scored on `store`.

    sqrt(queries x nprobe) lists: assigning the M descriptors costs M x lists, scanning costs queries x nprobe x
    M / lists, so the two are even there. The lists are trained on a random sample of the store.
    """
    total = store.ntotal
    lists = int(np.clip(round(math.sqrt(queries * _NPROBE)), 1, max(1, total // _TRAINING)))
    coarse = faiss.IndexIVFPQFastScan(faiss.IndexFlatIP(_DIM), _DIM, lists, _PQ_PARTS, 4, faiss.METRIC_INNER_PRODUCT)
    sample = np.random.default_rng(0).choice(total, size=min(total, _TRAINING * lists), replace=False)
    coarse.train(store.reconstruct_batch(np.sort(sample)))
    for start in range(0, total, _CHUNK):
        coarse.add(store.reconstruct_n(start, min(_CHUNK, total - start)))
    coarse.nprobe = min(_NPROBE, lists)
    refined = faiss.IndexRefine(coarse, store)
    refined.k_factor = _K_FACTOR
    return refined
