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

Ties: gallery items with exactly the same score for a query (the same float32 inner product,
computed pair by pair by FAISS's `fvec_inner_products_by_idx` so that it never depends on which
other queries share a search: exact duplicates, or a collapsed model whose vectors are all equal)
have no order, and any order chosen for them (FAISS's, the row order) would make a figure depend on how
the rows happen to be numbered. Every metric is therefore the expected value over all orders of
each run of tied items, each order equally likely (McSherry & Najork, "Computing Information
Retrieval Performance Measures Efficiently in the Presence of Tied Scores", ECIR 2008; scikit-learn's
`ndcg_score` does the same by default). With t tied items of which r are relevant starting after
a items of which c are relevant, position i in the run (0-based, a <= i < a + t) has
E[rel(i)] = r / t and E[rel(i) P(i)] = (r / t) (1 + c + (i - a) (r - 1) / (t - 1)) / (i + 1), and
the run holds a relevant item among its first m positions with probability
1 - C(t - r, m) / C(t, m). Without ties these are the plain formulas above. A query's scores
depend only on its own ranking, never on which other queries share its search, so per-group
results average to the totals. pytorch-metric-learning's `AccuracyCalculator` takes FAISS's order
instead: the two agree whenever no two gallery items tie at a rank that matters.
A re-ranked search (`retrieval.core.rerank`) orders by its own criterion, not by the scores it
returns, so its order is taken as given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import faiss
import numpy as np

from retrieval.core.learned_rerank import RowReranker
from retrieval.core.rerank import Reranker
from retrieval.errors import UserError
from retrieval.metrics._inputs import ArrayLike, _to_numpy, as_embeddings, as_ks, as_label_codes, as_mask

__all__ = [
    "PerQuery",
    "check_queries_have_positives",
    "nearest_neighbor_agreement",
    "per_query_scores",
    "retrieval_metrics",
]

# Neighbor slots (queries x k) searched at once. A slot costs ~125 bytes: ~90 in numpy arrays (the
# pair scores, the hit matrix and the arithmetic of tied runs; tracemalloc's peak) and ~35 in FAISS's
# result buffers, so a chunk peaks near 260 MB whatever N and R are.
_SLOTS_PER_CHUNK = 1 << 21


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
    hit_rates: np.ndarray  # (Q, max(ks)) column k-1: chance of a same-class neighbor within the top k
    average_precision: np.ndarray  # (Q,) AP@R
    r_precision: np.ndarray  # (Q,)


class PerQuery(NamedTuple):
    """The score of every scored query, in input row order: what the metrics average, and what
    confidence intervals and paired comparisons resample (`retrieval.metrics.bootstrap`)."""

    rows: np.ndarray  # (Q,) int64 row of each scored query in the inputs, increasing
    labels: np.ndarray  # (Q,) the query's label, as given
    hit_rates: np.ndarray  # (Q, max(ks)) column k-1: Recall@k's term, the share of tie orders with a hit in the top k
    average_precision: np.ndarray  # (Q,) AP@R, whose mean is MAP@R
    r_precision: np.ndarray  # (Q,)
    num_without_positive: int  # queries left out because their class has no other gallery item

    def hits(self, k: int) -> np.ndarray:
        """(Q,) float64 Recall@k's terms: 1.0 where a same-class item is among the query's k nearest, a
        fraction where that depends on the order of tied items (the share of orders that have one).

        Raises:
            ValueError: k outside [1, max(ks)] of the scoring.
        """
        if not 1 <= k <= self.hit_rates.shape[1]:
            raise ValueError(f"k must lie in [1, {self.hit_rates.shape[1]}] (the deepest k scored), got {k}")
        return self.hit_rates[:, k - 1].astype(np.float64)

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
    similarity; they are not renormalized here. Gallery items tied at the same score count in
    every order equally (the module docstring), so the result does not depend on row order.

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
    rerank: Reranker | RowReranker | None = None,
) -> PerQuery:
    """Every query's first-hit rank, AP@R and R-precision, as `retrieval_metrics` computes them.

    Same arguments, protocol and errors as `retrieval_metrics`; `ks` only sets how deep every
    query searches (max(ks)), the depth of `hit_rates`. With `rerank`
    (`retrieval.core.rerank`) the gallery is stored and searched through it; a query in the
    gallery never sees its own row, in the expansion steps either. A `RowReranker` (a learned
    pair model, `retrieval.core.learned_rerank`) is told which input rows its queries are.

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
        hit_rates=scores.hit_rates[order],
        average_precision=scores.average_precision[order],
        r_precision=scores.r_precision[order],
        num_without_positive=int((~scored).sum()),
    )


def nearest_neighbor_agreement(reference: np.ndarray, other: np.ndarray) -> float:
    """Share of items whose nearest other item under `other` is one of their nearest under `reference`.

    What an approximation of a model (an int8 export) keeps of its nearest-neighbour graph, labels
    aside: a figure that metrics averaged over classes can hide. Every item searches all the others
    by inner product; under `reference`, every item tied at the top score is a nearest one (ties by
    the module docstring's pair-by-pair scores), so an order among equals never counts as a change.

    Args:
        reference: `(N, D)` embeddings (the float model's), N >= 2.
        other: `(N, D')` embeddings of the same items (the approximation's).

    Raises:
        ValueError: fewer than 2 items, or row counts that differ.
    """
    if len(reference) < 2 or len(reference) != len(other):
        raise ValueError(f"need the same N >= 2 items in both, got {len(reference)} and {len(other)}")
    reference = np.ascontiguousarray(reference, dtype=np.float32)
    best = _nearest_other(reference)
    chosen = _nearest_other(np.ascontiguousarray(other, dtype=np.float32))
    scores = _pair_scores(reference, reference, np.stack([best, chosen], axis=1))
    return float(np.mean(scores[:, 1] >= scores[:, 0]))


def _nearest_other(vectors: np.ndarray) -> np.ndarray:
    """`(N,)` the row of each row's nearest other row by inner product (its own row left out by index)."""
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    _, found = index.search(vectors, 2)
    rows = np.arange(len(vectors))
    return np.where(found[:, 0] == rows, found[:, 1], found[:, 0])


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
    needs and holds as many queries as the memory budget allows at that depth. A few neighbors
    more are searched (`_search_depth`) to see where the run of tied scores at that depth ends;
    only the queries whose run may continue past everything searched (an exact tie, or scores
    too dense to tell apart by FAISS's, see `_Gallery.nearest`) are searched again, deeper, since
    the run's full size and relevant count enter their scores.

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
    reranked = gallery.rerank is not None
    # Multi-label hits go through a (n, W, P) array of packed label sets: fewer slots per chunk.
    slots = _SLOTS_PER_CHUNK // (gallery_codes.shape[1] if gallery_codes.ndim == 2 else 1)

    def scored(chunk: _Queries, width: int, depth: int) -> list[_QueryScores]:
        """The chunk's scores from its `width` nearest, searched `depth` deep, and deeper where that is too shallow."""
        if gallery.rerank is not None:  # the reranker's order is taken as given: no runs of ties
            search = gallery.rows(chunk, excludes_self)
            if isinstance(gallery.rerank, RowReranker):
                _, neighbors = gallery.rerank.search_rows(search, chunk.embeddings, chunk.rows, depth)
            else:
                _, neighbors = gallery.rerank.search(search, chunk.embeddings, depth)
            hits = _relevant(gallery_codes[neighbors[:, :width]], chunk.codes)
            return [_QueryScores(chunk.rows, *_score_hits(hits, None, chunk.num_positives, min_width))]
        similarities, neighbors, unseen = gallery.nearest(chunk, depth, excludes_self)
        boundary = similarities[:, width - 1]
        known = unseen < boundary  # every item tied with or above the boundary was searched
        run_ends = np.count_nonzero(similarities >= boundary[:, None], axis=1)  # the scores are sorted
        results = []
        # Scored on exactly `width` neighbors unless the boundary's run of ties reaches further.
        for rows in (known & (run_ends == width), known & (run_ends > width)):
            stop = int(run_ends[rows].max(initial=width))
            done = chunk.take(rows)
            hits = _relevant(gallery_codes[neighbors[rows, :stop]], done.codes)
            runs = similarities[rows, :stop]
            results.append(_QueryScores(done.rows, *_score_hits(hits, runs, done.num_positives, min_width)))
        deeper = min(4 * depth, max_width)
        unsure, step = chunk.take(~known), max(1, slots // deeper)
        for start in range(0, len(unsure.rows), step):
            results += scored(unsure.take(slice(start, start + step)), width, deeper)
        return results

    def depth_of(width: int) -> int:
        return _search_depth(width, max_width, reranked)

    scores = []
    for rows, width in _chunks(queries.num_positives[order], min_width, max_width, slots, depth_of):
        scores += scored(queries.take(order[rows]), width, depth_of(width))
    return scores


def _search_depth(width: int, max_width: int, reranked: bool) -> int:
    """Neighbors first searched for a query that needs `width`: one more with a reranker (whose order has no
    ties), else a margin of 16 + width / 16 more, so that the run of ties at the boundary, and any item FAISS's
    rounding could misplace across it, is almost always within reach of one search."""
    return min(width + (1 if reranked else 16 + width // 16), max_width)


def _relevant(neighbor_codes: np.ndarray, query_codes: np.ndarray) -> np.ndarray:
    """(n, W) bool: same class as the query, or (multi-label) at least one label in common."""
    if query_codes.ndim == 1:
        return neighbor_codes == query_codes[:, None]
    return (neighbor_codes & query_codes[:, None, :]).any(axis=2)


def _chunks(
    num_positives: np.ndarray, min_width: int, max_width: int, slots: int, depth: Callable[[int], int]
) -> Iterator[tuple[slice, int]]:
    """Split queries sorted by decreasing R into chunks within the memory budget.

    Args:
        num_positives: (Q,) R of each query, in decreasing order.
        min_width: neighbors needed whatever R is, i.e. max(ks).
        max_width: neighbors available, the gallery size (less one when queries skip themselves).
        slots: neighbor slots (queries x depth searched) per chunk.
        depth: how many neighbors are searched for a width.

    Yields:
        (rows, width): a slice of the queries and how many neighbors they need.
    """
    start = 0
    while start < len(num_positives):
        width = min(max(min_width, int(num_positives[start])), max_width)
        stop = start + max(1, slots // depth(width))
        yield slice(start, stop), width
        start = stop


class _Gallery:
    """The gallery's vectors in an exact inner-product index, searched plainly or through a reranker."""

    def __init__(self, vectors: np.ndarray, rerank: Reranker | RowReranker | None) -> None:
        self.vectors = np.ascontiguousarray(vectors if rerank is None else rerank.database(vectors), dtype=np.float32)
        self.index = faiss.IndexFlatIP(vectors.shape[1])
        self.index.add(self.vectors)
        self.rerank = rerank
        # FAISS's search rounds an inner product differently from `_pair_scores` by at most about
        # D float32 epsilons of |q| |g| (a D-term sum each way); twice that bounds how far a score
        # seen by the search and the score that ranks can disagree.
        largest = float(np.max(np.linalg.norm(self.vectors, axis=1), initial=1.0))
        self.tolerance = 2.0 * vectors.shape[1] * float(np.finfo(np.float32).eps) * max(largest, 1.0) ** 2

    def nearest(self, queries: _Queries, width: int, excludes_self: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(n, width)` scores and int64 gallery rows nearest each query, best first, its own row left out if
        `excludes_self`, and `(n,)` float64 bounds that no gallery item left out scores above.

        The scores are recomputed pair by pair (`_pair_scores`) and each row is sorted by them:
        FAISS's batched search rounds the same pair differently depending on how many queries
        share the call, and ties must not depend on that. An item left out scored at most the
        last FAISS score by FAISS, so at most that plus `tolerance` pair by pair (-inf when the
        whole gallery was returned).
        """
        found, neighbors = self.rows(queries, excludes_self).search(queries.embeddings, width)
        scores = _pair_scores(queries.embeddings, self.vectors, neighbors)
        order = np.argsort(-scores, axis=1, kind="stable")
        returned_all = width == len(self.vectors) - excludes_self
        unseen = np.full(len(found), -np.inf) if returned_all else found[:, -1].astype(np.float64) + self.tolerance
        return np.take_along_axis(scores, order, axis=1), np.take_along_axis(neighbors, order, axis=1), unseen

    def rows(self, queries: _Queries, excludes_self: bool) -> _RowSearch:
        """The gallery as the queries search it: each one's own row left out if `excludes_self`."""
        return _RowSearch(self.index, self.vectors, queries.gallery_rows if excludes_self else None)


class _RowSearch:
    """A `retrieval.core.rerank.Gallery` over gallery rows, where query i never finds `own_rows[i]`."""

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


def _pair_scores(queries: np.ndarray, vectors: np.ndarray, neighbors: np.ndarray) -> np.ndarray:
    """`(n, W)` float32 inner product of query i with `vectors[neighbors[i, j]]`, one pair at a time.

    FAISS's `fvec_inner_products_by_idx` computes each pair with the same routine whatever else
    is computed beside it, so equal vectors always score equally: the definition of a tie.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    neighbors = np.ascontiguousarray(neighbors, dtype=np.int64)
    scores = np.empty(neighbors.shape, dtype=np.float32)
    faiss.fvec_inner_products_by_idx(  # type: ignore[attr-defined]  # not in FAISS's stubs
        faiss.swig_ptr(scores),
        faiss.swig_ptr(queries),
        faiss.swig_ptr(vectors),
        faiss.swig_ptr(neighbors),
        queries.shape[1],
        neighbors.shape[0],
        neighbors.shape[1],
    )
    return scores


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


def _score_hits(
    hits: np.ndarray, similarities: np.ndarray | None, num_positives: np.ndarray, max_k: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Score queries from their hit matrix, averaging over the orders of tied items (the module docstring).

    Args:
        hits: (n, W) bool, whether the i-th nearest gallery item has the query's class.
        similarities: (n, W) their scores, best first, to find the runs of ties; every run ends
            within W. None: the order is taken as given (no ties).
        num_positives: (n,) R of each query, 1 <= R <= W.
        max_k: the deepest k of Recall@k.

    Returns:
        The n queries' hit rates (n, max_k), AP@R and R-precision, each (n,).
    """
    count, width = hits.shape
    positions = np.arange(width, dtype=np.int32)
    starts_run = np.ones((count, width), dtype=bool)
    if similarities is not None:
        starts_run[:, 1:] = similarities[:, 1:] != similarities[:, :-1]
    ends_run = np.ones_like(starts_run)
    ends_run[:, :-1] = starts_run[:, 1:]
    start = np.maximum.accumulate(np.where(starts_run, positions, 0), axis=1)  # a: items above the run
    end = np.minimum.accumulate(np.where(ends_run, positions + 1, width)[:, ::-1], axis=1)[:, ::-1]
    size = end - start  # t
    relevant_before = np.zeros((count, width + 1), dtype=np.int32)
    np.cumsum(hits, axis=1, out=relevant_before[:, 1:])
    above = np.take_along_axis(relevant_before, start, axis=1)  # c: relevant items above the run
    in_run = np.take_along_axis(relevant_before, end, axis=1) - above  # r
    share = in_run / size  # E[rel(i)]
    earlier_pairs = np.divide((positions - start) * (in_run - 1.0), size - 1, out=np.zeros(share.shape), where=size > 1)
    within_r = positions < num_positives[:, None]
    precision_terms = share * (1.0 + above + earlier_pairs) / (positions + 1)
    average_precision = np.sum(precision_terms, axis=1, where=within_r) / num_positives
    r_precision = np.sum(share, axis=1, where=within_r) / num_positives
    return _hit_rates(start, size, above, in_run, max_k), average_precision, r_precision


def _hit_rates(start: np.ndarray, size: np.ndarray, above: np.ndarray, in_run: np.ndarray, max_k: int) -> np.ndarray:
    """(n, max_k): column k-1 is the chance of a relevant item in the top k over the orders of tied items.

    1 with a relevant item above the run holding rank k; otherwise one minus the hypergeometric
    chance that the m = k - a items the top k takes from the run (t items, r relevant) are all
    irrelevant, prod_{j<m} (t - r - j) / (t - j).
    """
    cutoffs = np.minimum(np.arange(1, max_k + 1), start.shape[1])  # k, or the whole ranking when shorter
    column = cutoffs - 1
    first, run, relevant = start[:, column], size[:, column], in_run[:, column]
    drawn = cutoffs - first
    all_missed = np.ones(first.shape)
    for j in range(int(drawn.max(initial=0))):
        draws = j < drawn
        factor = np.divide(run - relevant - j, run - j, out=np.ones(first.shape), where=draws)
        all_missed *= np.clip(factor, 0.0, 1.0)
    return np.where(above[:, column] > 0, 1.0, 1.0 - all_missed)
