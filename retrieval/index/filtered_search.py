"""Search among the vectors that pass a filter, inside FAISS: an `IDSelector` in the search parameters.

The selector is a bitmap over the labels of the index FAISS searches: insertion positions under
an `IDMap2` (flat, hnsw, ivfpq; the IDMap2's own selector translation does not reach the IVF
under ivfpq's re-ranking stage, so the selector is built in position space for all three), ids
for ivf. The graph or the inverted lists skip vectors that do not pass while they search, so k
passing vectors come back whenever k pass, never fewer because the top k happened not to pass.

Two ways to search, chosen by how many vectors pass:

- at most `EXACT_MAX_PASSING` (20,000, the size below which `auto` builds a flat index because
  exact search is fast): exact search over the passing vectors (the flat vectors hnsw links and
  ivfpq re-ranks with, ivf's lists all probed), so a selective filter never loses recall.
- more: the approximate search with the tuned parameters widened by the inverse of the share
  that passes (`nprobe`, `efSearch` times total / passing; nprobe at most nlist, which is exact),
  so about as many passing candidates are scanned as an unfiltered search scans: the tuned
  recall, not a lower one. A graph whose widened efSearch would pass 2,048 (the most tuning
  explores) or the number of vectors is scanned exactly instead: such a walk visits most of the
  graph, and a graph walk among very few passing nodes can miss some of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import faiss
import numpy as np

from retrieval.index.choice import FLAT_MAX_VECTORS
from retrieval.index.tuning import find_index

__all__ = ["EXACT_MAX_PASSING", "LabelSpace", "search_parameters", "search_passing", "search_with"]

EXACT_MAX_PASSING = FLAT_MAX_VECTORS
_MAX_EF_SEARCH = 2048  # the largest efSearch tuning explores; FAISS pops its candidate heap in O(efSearch)


@dataclass(frozen=True)
class LabelSpace:
    """The index FAISS searches and the map between its labels and our ids.

    Attributes:
        index: the `IDMap2`'s inner index, or the IVF index itself (whose labels are ids).
        id_map: `(L,)` id of each label under an `IDMap2`; `None` when labels are ids.
        next_id: every stored id is below it.
    """

    index: faiss.Index
    id_map: np.ndarray | None
    next_id: int

    @classmethod
    def of(cls, index: faiss.Index, next_id: int) -> LabelSpace:
        """The label space of a `SearchIndex`'s FAISS index whose ids are all below `next_id`."""
        if isinstance(index, faiss.IndexIDMap2):
            return cls(faiss.downcast_index(index.index), faiss.vector_to_array(index.id_map), next_id)
        return cls(index, None, next_id)

    def label_mask(self, ids: np.ndarray) -> np.ndarray:
        """Bool mask over every label of the index: True where the label's id is in `ids`."""
        by_id = np.zeros(self.next_id, dtype=bool)
        by_id[ids] = True
        return by_id if self.id_map is None else by_id[self.id_map]

    def ids(self, labels: np.ndarray) -> np.ndarray:
        """Ids of FAISS result `labels` (any shape); -1 (no result) stays -1."""
        if self.id_map is None:
            return labels
        return np.where(labels >= 0, self.id_map[np.maximum(labels, 0)], -1)


def search_passing(
    space: LabelSpace, queries: np.ndarray, k: int, passing_ids: np.ndarray, searchable: int
) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each query among `passing_ids` only, FAISS-side.

    Args:
        space: the index and its label map (`LabelSpace.of`).
        queries: `(Q, D)` float32 unit rows.
        k: results per query; rows with fewer passing vectors are padded with id -1.
        passing_ids: `(P,)` ids that pass, all stored and searchable (removed ids excluded).
        searchable: the number of searchable vectors, for the share that passes.

    Returns:
        `(scores, ids)`: `(Q, k)` FAISS distances (inner products) and ids.
    """
    mask = space.label_mask(passing_ids)
    bitmap = np.packbits(mask, bitorder="little")  # FAISS reads bit i of byte i // 8 for label i
    selector = faiss.IDSelectorBitmap(len(mask), faiss.swig_ptr(bitmap))
    widen = searchable / max(len(passing_ids), 1)
    # `_referenced` keeps the objects FAISS points to (bitmap, selector, nested parameters) alive until it returns.
    target, parameters, _referenced = _plan(space.index, selector, widen, len(passing_ids) <= EXACT_MAX_PASSING)
    scores, labels = search_with(target, queries, k, parameters)
    return scores, space.ids(labels)


def search_with(
    index: faiss.Index, queries: np.ndarray, k: int, parameters: faiss.SearchParameters
) -> tuple[np.ndarray, np.ndarray]:
    """`index.search(queries, k, params=parameters)`, also where faiss.contrib.torch_utils is imported.

    That module (pytorch-metric-learning imports it) replaces `search` with a wrapper without `params`
    and keeps FAISS's own numpy method as `search_numpy`: that one is called when it is there.
    """
    search = getattr(index, "search_numpy", index.search)
    return search(queries, k, params=parameters)


def _plan(
    index: faiss.Index, selector: faiss.IDSelector, widen: float, exact: bool
) -> tuple[faiss.Index, faiss.SearchParameters, list[object]]:
    """The index to search, its parameters with `selector`, and the parameter objects they point to."""
    graph = find_index(index, faiss.IndexHNSW)
    refine = find_index(index, faiss.IndexRefine)
    ivf = find_index(index, faiss.IndexIVF)
    wide_ef = math.ceil(graph.hnsw.efSearch * widen) if graph is not None else 0
    if graph is not None and wide_ef > min(_MAX_EF_SEARCH, index.ntotal):
        exact = True  # a graph search that wide visits most of the graph: a scan is cheaper and exact
    if exact and (graph is not None or refine is not None):
        storage = graph.storage if graph is not None else refine.refine_index  # type: ignore[union-attr]
        return faiss.downcast_index(storage), search_parameters("SearchParameters", sel=selector), []
    if graph is not None:
        return index, search_parameters("SearchParametersHNSW", efSearch=wide_ef, sel=selector), []
    if ivf is not None:
        nprobe = ivf.nlist if exact else min(ivf.nlist, math.ceil(ivf.nprobe * widen))
        probe = search_parameters("SearchParametersIVF", nprobe=nprobe, sel=selector)
        if refine is None:
            return index, probe, []
        return (
            index,
            search_parameters("IndexRefineSearchParameters", k_factor=refine.k_factor, base_index_params=probe),
            [probe],
        )
    return index, search_parameters("SearchParameters", sel=selector), []


def search_parameters(kind: str, **settings: object) -> faiss.SearchParameters:
    """FAISS's `SearchParameters` subclass named `kind`, with `settings` (FAISS's stubs lack these constructors)."""
    parameters = getattr(faiss, kind)()
    for name, value in settings.items():
        setattr(parameters, name, value)
    return parameters
