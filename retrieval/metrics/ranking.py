"""Recall@K, MAP@R and R-precision of an embedding space, from exact FAISS inner-product search.

Every query retrieves its nearest gallery items by inner product (`faiss.IndexFlatIP`), in
chunks so that memory stays bounded, and every metric is computed from the boolean matrix
"is the i-th neighbor of the same class" with vectorized numpy. Definitions follow the deep
metric learning literature:

- Recall@K: fraction of queries with at least one same-class item among their K nearest
  gallery items (Song et al., "Deep Metric Learning via Lifted Structured Feature Embedding",
  CVPR 2016); it equals PML's `precision_at_1` for K = 1.
- R-precision and MAP@R (Musgrave et al., "A Metric Learning Reality Check", ECCV 2020): with
  R the number of same-class items in the gallery (the query itself left out) and rel(i) = 1 if
  the i-th neighbor is of the query's class,
  R-precision = (1/R) sum_{i<=R} rel(i) and MAP@R = (1/R) sum_{i<=R} P(i) rel(i),
  P(i) = (1/i) sum_{j<=i} rel(j).

Multi-label data (an item carries a set of labels, given as (N, C) multi-hot rows) uses the
same definitions with "of the query's class" read as "shares at least one label with the
query"; R counts the gallery items that share a label with the query.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import faiss
import numpy as np

from retrieval.errors import UserError
from retrieval.metrics._inputs import ArrayLike, _to_numpy, as_embeddings, as_ks, as_label_codes, as_mask
from retrieval.rerank import Reranker

__all__ = ["PerQuery", "check_queries_have_positives", "per_query_scores", "retrieval_metrics"]

# Neighbor slots (queries x k) searched at once. A slot costs ~70 bytes across FAISS's result
# buffers and the hit matrices (measured), so a chunk peaks near 300 MB whatever N and R are.
_SLOTS_PER_CHUNK = 1 << 22


class _Queries(NamedTuple):
    """The queries to evaluate, row-aligned."""

    embeddings: np.ndarray  # (Q, D) float32
    codes: np.ndarray  # (Q,) class codes, or (Q, P) packed label sets (multi-label)
    num_positives: np.ndarray  # (Q,) R: same-class gallery items, the query itself excluded
    gallery_rows: np.ndarray  # (Q,) the query's own row in the gallery index, -1 if not in the gallery
    rows: np.ndarray  # (Q,) the query's row in the inputs

    def take(self, rows: np.ndarray | slice) -> _Queries:
        """The queries selected by `rows` (indices, boolean mask or slice)."""
        return _Queries(*(field[rows] for field in self))


class _QueryScores(NamedTuple):
    """Per-query results, row-aligned."""

    rows: np.ndarray  # (Q,) the query's row in the inputs
    first_hit: np.ndarray  # (Q,) 0-based rank of the first same-class neighbor, past the end if none
    average_precision: np.ndarray  # (Q,) AP@R
    r_precision: np.ndarray  # (Q,)


class PerQuery(NamedTuple):
    """The score of every scored query, in input row order: what the metrics average, and what
    confidence intervals and paired comparisons resample (`retrieval.metrics.bootstrap`)."""

    rows: np.ndarray  # (Q,) int64 row of each scored query in the inputs, increasing
    labels: np.ndarray  # (Q,) the query's label, as given
    first_hit: np.ndarray  # (Q,) 0-based rank of the first same-class neighbor; >= max(ks) when none within it
    average_precision: np.ndarray  # (Q,) AP@R, whose mean is MAP@R
    r_precision: np.ndarray  # (Q,)
    num_without_positive: int  # queries left out because their class has no other gallery item

    def hits(self, k: int) -> np.ndarray:
        """(Q,) float64, 1.0 where a same-class item is among the query's k nearest: Recall@k's terms."""
        return (self.first_hit < k).astype(np.float64)

    def summary(self, ks: Sequence[int]) -> dict[str, float | int]:
        """The metrics of `retrieval_metrics`: each per-query score averaged over the queries."""
        recalls = {f"recall@{k}": float(np.mean(self.hits(k))) for k in ks}
        return {
            **recalls,
            "map@r": float(np.mean(self.average_precision)),
            "r_precision": float(np.mean(self.r_precision)),
            "num_queries": len(self.rows),
            "num_queries_without_positive": self.num_without_positive,
        }


def retrieval_metrics(
    embeddings: ArrayLike,
    labels: ArrayLike,
    ks: Sequence[int] = (1, 2, 4, 8),
    query_mask: ArrayLike | None = None,
    gallery_mask: ArrayLike | None = None,
) -> dict[str, float | int]:
    """Recall@K, MAP@R and R-precision of queries searching a gallery by inner product.

    Without masks every item queries all the others (the CUB-200 / Cars196 / SOP protocol).
    With masks (the In-Shop protocol) queries search the gallery rows only. An item that is both
    a query and in the gallery never retrieves itself: it is left out by row index, not by
    distance, so an exact duplicate of the query still counts as a neighbor.

    Similarity is the plain inner product: pass L2-normalized embeddings to get cosine
    similarity; they are not renormalized here. Exact ties keep FAISS's order (the higher
    gallery row first), which matters only for exact duplicates with different labels.

    Queries whose class has no other item in the gallery (R = 0) cannot be scored; they are left
    out of every metric and counted in `num_queries_without_positive`, as pytorch-metric-learning
    does.

    Args:
        embeddings: (N, D) embeddings, numpy or torch, expected L2-normalized.
        labels: (N,) integer class ids, or (N, C) multi-hot rows for multi-label data (a
            neighbor is relevant when it shares a label with the query), numpy or torch.
        ks: the K values of Recall@K.
        query_mask: (N,) bool, rows that are queries; None for every row.
        gallery_mask: (N,) bool, rows that form the gallery; None for every row.

    Returns:
        `recall@K` for each K in `ks`, `map@r`, `r_precision` (python floats in [0, 1]),
        `num_queries` (queries scored) and `num_queries_without_positive` (queries left out).

    Raises:
        UserError: on malformed inputs, or when no query has a same-class item in the gallery.

    Example:
        >>> import numpy as np
        >>> embeddings = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
        >>> retrieval_metrics(embeddings, np.array([0, 0, 1, 1]), ks=(1,))["recall@1"]
        0.5
    """
    return per_query_scores(embeddings, labels, ks, query_mask, gallery_mask).summary(as_ks(ks))


def per_query_scores(
    embeddings: ArrayLike,
    labels: ArrayLike,
    ks: Sequence[int] = (1, 2, 4, 8),
    query_mask: ArrayLike | None = None,
    gallery_mask: ArrayLike | None = None,
    rerank: Reranker | None = None,
) -> PerQuery:
    """Every query's first-hit rank, AP@R and R-precision, as `retrieval_metrics` computes them.

    Same arguments, protocol and errors as `retrieval_metrics`; `ks` only sets how deep every
    query searches (max(ks)), so `first_hit` is exact below it. With `rerank`
    (`retrieval.rerank`) the gallery is stored and searched through it; a query in the
    gallery never sees its own row, in the expansion steps either.

    Returns:
        The scored queries in input row order (`PerQuery.summary(ks)` gives the metrics).
    """
    embeddings = as_embeddings(embeddings)
    codes = as_label_codes(labels, len(embeddings))
    ks = as_ks(ks)
    is_query = as_mask(query_mask, len(embeddings), "query_mask")
    in_gallery = as_mask(gallery_mask, len(embeddings), "gallery_mask")

    queries = _make_queries(embeddings, codes, is_query, in_gallery)
    scored = queries.num_positives > 0
    _require_a_positive(scored)
    gallery = _Gallery(embeddings[in_gallery], rerank)
    scores = _score(gallery, codes[in_gallery], queries.take(scored), max(ks))
    order = np.argsort(scores.rows)
    rows = scores.rows[order]
    return PerQuery(
        rows=rows,
        labels=_to_numpy(labels)[rows],
        first_hit=scores.first_hit[order],
        average_precision=scores.average_precision[order],
        r_precision=scores.r_precision[order],
        num_without_positive=int((~scored).sum()),
    )


def check_queries_have_positives(
    labels: ArrayLike, query_mask: ArrayLike | None = None, gallery_mask: ArrayLike | None = None
) -> int:
    """Check, before any embedding is computed, that `retrieval_metrics` will be able to score.

    Args:
        labels: (N,) integer class ids of the test set, or (N, C) multi-hot rows.
        query_mask: (N,) bool query rows; None for every row.
        gallery_mask: (N,) bool gallery rows; None for every row.

    Returns:
        The number of queries without a same-class gallery item (they will be left out).

    Raises:
        UserError: when no query has a same-class item in the gallery.
    """
    codes = as_label_codes(labels, len(labels))
    is_query = as_mask(query_mask, len(codes), "query_mask")
    in_gallery = as_mask(gallery_mask, len(codes), "gallery_mask")
    scored = _num_positives(codes, is_query, in_gallery) > 0
    _require_a_positive(scored)
    return int((~scored).sum())


def _make_queries(embeddings: np.ndarray, codes: np.ndarray, is_query: np.ndarray, in_gallery: np.ndarray) -> _Queries:
    """Gather the query rows with their R and their own row in the gallery index.

    Args:
        embeddings: (N, D) float32.
        codes: (N,) class codes in [0, C), or (N, P) packed label sets.
        is_query: (N,) bool.
        in_gallery: (N,) bool.

    Returns:
        The Q = is_query.sum() queries, in row order.
    """
    self_in_gallery = in_gallery[is_query]
    gallery_rows = np.cumsum(in_gallery) - 1
    return _Queries(
        embeddings=embeddings[is_query],
        codes=codes[is_query],
        num_positives=_num_positives(codes, is_query, in_gallery),
        gallery_rows=np.where(self_in_gallery, gallery_rows[is_query], -1),
        rows=np.flatnonzero(is_query),
    )


def _num_positives(codes: np.ndarray, is_query: np.ndarray, in_gallery: np.ndarray) -> np.ndarray:
    """(Q,) R of each query: same-class gallery items, the query itself excluded."""
    if codes.ndim == 2:
        return _num_sharing(codes, is_query, in_gallery)
    gallery_class_sizes = np.bincount(codes[in_gallery], minlength=codes.max() + 1)
    return gallery_class_sizes[codes[is_query]] - in_gallery[is_query]


def _num_sharing(label_sets: np.ndarray, is_query: np.ndarray, in_gallery: np.ndarray) -> np.ndarray:
    """(Q,) R of each query of multi-label data: gallery items sharing a label with it, itself excluded.

    One (queries x gallery) float32 product per chunk of queries, within the memory budget.
    """
    bits = np.unpackbits(label_sets, axis=1).astype(np.float32)
    query_bits, gallery_bits = bits[is_query], bits[in_gallery].T
    step = max(1, _SLOTS_PER_CHUNK // max(gallery_bits.shape[1], 1))
    counts = np.concatenate(
        [((query_bits[i : i + step] @ gallery_bits) > 0).sum(axis=1) for i in range(0, len(query_bits), step)]
    )
    # A query shares a label with itself unless it has none.
    return counts - (in_gallery[is_query] & query_bits.any(axis=1))


def _require_a_positive(scored: np.ndarray) -> None:
    if not scored.any():
        raise UserError(
            "no query has a same-class image in the gallery, so retrieval cannot be scored; "
            "check the query/gallery split and that test labels are shared between queries and gallery"
        )


def _score(gallery: _Gallery, gallery_codes: np.ndarray, queries: _Queries, min_width: int) -> _QueryScores:
    """Score queries: first those outside the gallery, then those that must skip their own row.

    Args:
        gallery: the gallery, G vectors.
        gallery_codes: (G,) class codes of the gallery rows.
        queries: Q queries, each with R >= 1.
        min_width: neighbors every query needs whatever its R, i.e. max(ks).

    Returns:
        The Q queries' scores, in no particular order.
    """
    chunk_scores = []
    for excludes_self in (False, True):
        group = queries.take((queries.gallery_rows >= 0) == excludes_self)
        chunk_scores += _score_group(gallery, gallery_codes, group, min_width, excludes_self)
    return _QueryScores(*map(np.concatenate, zip(*chunk_scores, strict=True)))


def _score_group(
    gallery: _Gallery,
    gallery_codes: np.ndarray,
    queries: _Queries,
    min_width: int,
    excludes_self: bool,
) -> list[_QueryScores]:
    """Score queries that are all in the gallery, or all outside it, chunk by chunk.

    Queries are taken in decreasing R, so each chunk searches only as deep as its own largest R
    needs and holds as many queries as the memory budget allows at that depth.

    Args:
        gallery: the gallery, G vectors.
        gallery_codes: (G,) class codes of the gallery rows, or (G, P) packed label sets.
        queries: Q queries, each with R >= 1.
        min_width: neighbors every query needs whatever its R, i.e. max(ks).
        excludes_self: whether every query is in the gallery and must skip its own row.

    Returns:
        One `_QueryScores` per chunk, in no particular query order.
    """
    order = np.argsort(-queries.num_positives, kind="stable")
    max_width = len(gallery.vectors) - excludes_self
    # Multi-label hits go through a (n, W, P) array of packed label sets: fewer slots per chunk.
    slots = _SLOTS_PER_CHUNK // (gallery_codes.shape[1] if gallery_codes.ndim == 2 else 1)
    scores = []
    for rows, width in _chunks(queries.num_positives[order], min_width, max_width, slots):
        chunk = queries.take(order[rows])
        neighbors = gallery.nearest(chunk, width, excludes_self)
        hits = _relevant(gallery_codes[neighbors], chunk.codes)
        scores.append(_QueryScores(chunk.rows, *_score_hits(hits, chunk.num_positives)))
    return scores


def _relevant(neighbor_codes: np.ndarray, query_codes: np.ndarray) -> np.ndarray:
    """(n, W) bool: same class as the query, or (multi-label) at least one label in common."""
    if query_codes.ndim == 1:
        return neighbor_codes == query_codes[:, None]
    return (neighbor_codes & query_codes[:, None, :]).any(axis=2)


def _chunks(
    num_positives: np.ndarray, min_width: int, max_width: int, slots: int = _SLOTS_PER_CHUNK
) -> Iterator[tuple[slice, int]]:
    """Split queries sorted by decreasing R into chunks within the memory budget.

    Args:
        num_positives: (Q,) R of each query, in decreasing order.
        min_width: neighbors needed whatever R is, i.e. max(ks).
        max_width: neighbors available, the gallery size (less one when queries skip themselves).
        slots: neighbor slots (queries x width) per chunk.

    Yields:
        (rows, width): a slice of the queries and how many neighbors they need.
    """
    start = 0
    while start < len(num_positives):
        width = min(max(min_width, int(num_positives[start])), max_width)
        stop = start + max(1, slots // (width + 1))
        yield slice(start, stop), width
        start = stop


class _Gallery:
    """The gallery's vectors in an exact inner-product index, searched plainly or through a reranker."""

    def __init__(self, vectors: np.ndarray, rerank: Reranker | None) -> None:
        self.vectors = vectors if rerank is None else rerank.database(vectors)
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(self.vectors)
        self.rerank = rerank

    def nearest(self, queries: _Queries, width: int, excludes_self: bool) -> np.ndarray:
        """`(n, width)` int64 gallery rows nearest each query, best first, its own row left out if `excludes_self`."""
        own_rows = queries.gallery_rows if excludes_self else None
        search = _RowSearch(self.index, self.vectors, own_rows)
        if self.rerank is None:
            return search.search(queries.embeddings, width)[1]
        return self.rerank.search(search, queries.embeddings, width)[1]


class _RowSearch:
    """A `retrieval.rerank.Gallery` over gallery rows, where query i never finds `own_rows[i]`."""

    def __init__(self, index: faiss.IndexFlatIP, vectors: np.ndarray, own_rows: np.ndarray | None) -> None:
        self.index, self._vectors, self.own_rows = index, vectors, own_rows

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores, neighbors = self.index.search(
            np.ascontiguousarray(vectors, dtype=np.float32), k + (self.own_rows is not None)
        )
        if self.own_rows is None:
            return scores, neighbors
        keep = _not_own_row(neighbors, self.own_rows)
        return scores[keep].reshape(len(scores), -1), neighbors[keep].reshape(len(neighbors), -1)

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        return self._vectors[np.maximum(ids, 0)]


def _not_own_row(neighbors: np.ndarray, own_rows: np.ndarray) -> np.ndarray:
    """`(n, k)` bool: every neighbor but each query's own gallery row, matched by index.

    A query normally retrieves itself, but exact duplicates tie with it and can push it out of
    the list; those rows drop their last neighbor instead, so every row keeps k - 1 neighbors.

    Args:
        neighbors: (n, k) gallery rows, most similar first.
        own_rows: (n,) each query's row in the gallery.
    """
    is_own = neighbors == own_rows[:, None]
    is_own[~is_own.any(axis=1), -1] = True
    return ~is_own


def _score_hits(hits: np.ndarray, num_positives: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Score queries from their hit matrix.

    Args:
        hits: (n, W) bool, whether the i-th nearest gallery item has the query's class.
        num_positives: (n,) R of each query, 1 <= R <= W.

    Returns:
        The n queries' first-hit rank (W when no hit), AP@R and R-precision, each (n,).
    """
    ranks = np.arange(1, hits.shape[1] + 1)
    first_hit = np.where(hits.any(axis=1), hits.argmax(axis=1), hits.shape[1])
    hits_in_r = hits & (ranks <= num_positives[:, None])
    hits_so_far = np.cumsum(hits_in_r, axis=1, dtype=np.int32)
    precision_sums = np.sum(hits_so_far / ranks, axis=1, where=hits_in_r)
    return first_hit, precision_sums / num_positives, hits_so_far[:, -1] / num_positives
