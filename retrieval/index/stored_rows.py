"""Reading the vectors a FAISS index stores, by id: through `IndexIDMap2`, or straight from IVF's inverted lists.

IVF-Flat kinds keep their ids in the inverted lists (no id map), so a vector is found by its list
number and offset there.
"""

from __future__ import annotations

import faiss
import numpy as np

__all__ = ["ivf_directory", "stored_rows"]


def stored_rows(index: faiss.Index) -> tuple[np.ndarray, np.ndarray]:
    """`(ids (N,), vectors (N, D))` of every vector `index` holds (tombstoned ones too), in storage order."""
    if isinstance(index, faiss.IndexIDMap2):
        inner = faiss.downcast_index(index.index)
        ids = faiss.vector_to_array(index.id_map)
        # An explicit numpy buffer: with faiss.contrib.torch_utils imported (pytorch-metric-learning's
        # accuracy calculator does), reconstruct_n without one returns a torch tensor.
        vectors = inner.reconstruct_n(0, inner.ntotal, np.empty((inner.ntotal, index.d), dtype=np.float32))
        return ids, vectors
    invlists, parts, id_parts = _inverted_lists(index), [], []  # IVF-Flat: the lists hold the raw float32 vectors
    for number in range(invlists.nlist):
        size = invlists.list_size(number)
        if size:
            codes = faiss.rev_swig_ptr(invlists.get_codes(number), size * invlists.code_size)
            parts.append(codes.view(np.float32).reshape(size, index.d))
            id_parts.append(faiss.rev_swig_ptr(invlists.get_ids(number), size))
    ids = np.concatenate(id_parts) if id_parts else np.zeros(0, dtype=np.int64)
    return ids, np.concatenate(parts) if parts else np.zeros((0, index.d), np.float32)


def ivf_directory(index: faiss.Index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(list numbers, offsets, ids)` of every vector of an IVF index, sorted by id."""
    invlists = _inverted_lists(index)
    parts = []
    for number in range(invlists.nlist):
        size = invlists.list_size(number)
        if size:
            ids = faiss.rev_swig_ptr(invlists.get_ids(number), size).copy()
            parts.append((np.full(size, number), np.arange(size), ids))
    if parts:
        list_numbers, offsets, ids = (np.concatenate(column) for column in zip(*parts, strict=True))
    else:
        list_numbers = offsets = ids = np.zeros(0, dtype=np.int64)
    order = np.argsort(ids)
    return list_numbers[order], offsets[order], ids[order]


def _inverted_lists(index: faiss.Index) -> faiss.InvertedLists:
    """The inverted lists of an IVF index (the index itself or the one it wraps)."""
    invlists = faiss.extract_index_ivf(index).invlists
    if invlists is None:
        raise RuntimeError(f"{type(index).__name__} has no inverted lists")  # a built IVF index always has them
    return invlists
