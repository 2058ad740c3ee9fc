"""Re-ranking (`retrieval.core.rerank`) against naive loops over each method's definition."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.core.rerank import (
    IDENTICAL_SCORE,
    RERANK_METHODS,
    DatabaseAugmentation,
    KReciprocal,
    QueryExpansion,
    parse_rerank,
)
from retrieval.errors import UserError
from retrieval.index import clustered_unit_vectors
from retrieval.metrics import per_query_scores


class _Exact:
    """A brute-force gallery: the independent reference for what the methods search."""

    def __init__(self, vectors: np.ndarray) -> None:
        self.stored = vectors

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = vectors @ self.stored.T
        ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, ids, axis=1), ids

    def vectors(self, ids: np.ndarray) -> np.ndarray:
        return self.stored[ids]


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    vectors, labels = clustered_unit_vectors(700, dim=16, n_clusters=12, seed=3)
    return vectors[:600], vectors[600:], labels


def test_query_expansion_is_the_weighted_average_searched_again(data):
    gallery, queries, _ = data
    qe = QueryExpansion(k=3, alpha=3.0)
    _, ids = qe.search(_Exact(gallery), queries, 10)
    for query, found in zip(queries, ids, strict=True):
        scores = gallery @ query
        top = np.argsort(-scores)[:3]
        expanded = _unit(query + sum(max(scores[i], 0) ** 3 * gallery[i] for i in top))
        assert list(found) == list(np.argsort(-(gallery @ expanded))[:10])


def test_database_augmentation_averages_each_item_with_its_neighbours(data):
    gallery, _, _ = data
    augmented = DatabaseAugmentation(k=4, alpha=1.0).database(gallery)
    for row in (0, 17, 599):
        scores = gallery @ gallery[row]
        top = np.argsort(-scores)[:4]  # the item itself first
        assert top[0] == row
        expected = _unit(sum(scores[i] * gallery[i] for i in top))
        np.testing.assert_allclose(augmented[row], expected, atol=1e-5)
    np.testing.assert_array_equal(DatabaseAugmentation(k=1).database(gallery), gallery)


def _kreciprocal_loop(query: np.ndarray, items: np.ndarray, k1: int, k2: int, lam: float) -> list[int]:
    """Zhong et al.'s algorithm with Python sets, over the graph {query} + items (row 0 is the query)."""
    points = np.vstack([query, items])
    n = len(points)
    distance = np.maximum(2 - 2 * points @ points.T, 0)
    rank = [list(np.argsort(distance[i], kind="stable")) for i in range(n)]

    def reciprocal(i: int, k: int) -> set[int]:
        return {j for j in rank[i][: k + 1] if i in rank[j][: k + 1]}

    weights = np.zeros((n, n))
    for i in range(n):
        expanded = set(reciprocal(i, k1))
        for candidate in reciprocal(i, k1):
            half = reciprocal(candidate, int(np.around(k1 / 2)))
            if len(half & reciprocal(i, k1)) > 2 / 3 * len(half) - 1e-6:
                expanded |= half
        for j in expanded:
            weights[i, j] = np.exp(-distance[i, j])
        weights[i] /= weights[i].sum()
    weights = np.array([weights[rank[i][:k2]].mean(axis=0) for i in range(n)])
    final = []
    for j in range(1, n):
        jaccard = 1 - np.minimum(weights[0], weights[j]).sum() / np.maximum(weights[0], weights[j]).sum()
        final.append((1 - lam) * jaccard + lam * distance[0, j])
    return list(np.argsort(final, kind="stable"))


def test_kreciprocal_reorders_the_shortlist_as_the_paper_defines(data):
    gallery, queries, _ = data
    method = KReciprocal(k1=8, k2=3, lam=0.3, shortlist=30)
    _, ids = method.search(_Exact(gallery), queries[:12], 40)
    _, plain = _Exact(gallery).search(queries[:12], 40)
    for query, found, shortlist in zip(queries[:12], ids, plain, strict=True):
        order = _kreciprocal_loop(query, gallery[shortlist[:30]], 8, 3, 0.3)
        assert list(found[:30]) == list(shortlist[:30][order])
        assert list(found[30:]) == list(shortlist[30:])  # past the shortlist: the original order


def test_evaluation_never_lets_a_query_expand_with_itself():
    # Two far-apart clusters; expanding a query with itself would change nothing, with its neighbour it moves.
    vectors, labels = clustered_unit_vectors(400, dim=8, n_clusters=4, seed=1)
    plain = per_query_scores(vectors, labels).summary((1,))
    same = per_query_scores(vectors, labels, rerank=DatabaseAugmentation(k=1)).summary((1,))
    assert same == plain  # the identity database transform changes no metric
    for method in (QueryExpansion(), DatabaseAugmentation(), KReciprocal(shortlist=20)):
        scores = per_query_scores(vectors, labels, rerank=method)
        assert scores.hit_rates.shape == (400, 8) and 0 <= scores.summary((1,))["map@r"] <= 1


def test_specs_round_trip_and_refuse_unknown_names():
    for spec in ("qe:k=2,alpha=3", "dba:k=5,alpha=0", "kreciprocal:k1=20,k2=6,lam=0.3,shortlist=100"):
        assert parse_rerank(parse_rerank(spec).spec()) == parse_rerank(spec)
    assert parse_rerank("qe") == QueryExpansion()
    for bad, message in (
        ("rocchio", "unknown re-ranking method 'rocchio'; choose one of qe, dba, kreciprocal"),
        ("qe:beta=2", "re-ranking qe: unknown parameter 'beta=2'; its parameters are k, alpha"),
        ("qe:k=two", "re-ranking qe: k='two' is not a whole number"),
        ("qe:alpha=", "re-ranking qe: alpha='' is not a number"),
        ("kreciprocal:lam=2", "kreciprocal lam must lie in [0, 1], got 2"),
        ("dba:k=0", "re-ranking dba: k must be a whole number >= 1, got 0"),
    ):
        with pytest.raises(UserError) as error:
            parse_rerank(bad)
        assert str(error.value) == message


def test_a_search_index_reranks_like_the_exact_gallery_and_keeps_its_filter(data):
    from retrieval.core.rerank import rerank_at_query
    from retrieval.index import SearchIndex
    from retrieval.index.filter_language import parse_where
    from retrieval.index.gallery import IndexGallery

    gallery, queries, labels = data
    index = SearchIndex.build(gallery, {"label": labels[:600].tolist()}, kind="flat", progress=False)
    for method in (QueryExpansion(k=3), KReciprocal(k1=8, k2=3, shortlist=30)):
        _, expected = method.search(_Exact(gallery), queries, 10)
        scores, ids = method.search(IndexGallery(index), queries, 10)
        np.testing.assert_array_equal(ids, expected)  # SearchIndex ids are the build rows here
        np.testing.assert_allclose(scores, np.einsum("nd,nkd->nk", queries, gallery[ids]), atol=1e-5)
    where = parse_where("label in (0, 1, 2)")
    _, ids = QueryExpansion().search(IndexGallery(index, where), queries, 10)
    assert np.isin(labels[:600][ids[ids >= 0]], [0, 1, 2]).all()
    with pytest.raises(UserError, match="dba re-ranks the stored vectors, not a query"):
        rerank_at_query("dba")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["qe", "kreciprocal"])
def test_a_query_in_the_gallery_comes_back_first_at_every_grid_point(method):
    """The digits' pixels: `qe:k=10,alpha=0` averaged 27% of the images away from their own first rank."""
    from sklearn.datasets import load_digits

    pixels = load_digits().data.astype(np.float32)
    gallery = _unit(pixels - pixels.mean(axis=0))
    queries = gallery[:60] + np.float32(1e-5)  # the same image embedded again: float rounding apart
    for reranker in RERANK_METHODS[method].grid():
        scores, ids = reranker.search(_Exact(gallery), _unit(queries), 5)  # type: ignore[attr-defined]
        np.testing.assert_array_equal(ids[:, 0], np.arange(60), err_msg=reranker.spec())
        assert (scores[:, 0] >= IDENTICAL_SCORE).all()


def test_identical_results_go_first_and_the_rest_keep_the_reranked_order():
    # Two copies of the query (ids 3 and 5) and a tight cluster elsewhere that the expansion pulls towards.
    query = _unit(np.array([1.0, 0.2, 0.0]))
    cluster = _unit(np.array([[0.9, 0.5, 0.0], [0.88, 0.52, 0.0], [0.89, 0.51, 0.0]]))
    gallery = np.vstack([cluster, query, _unit(np.array([0.0, 0.0, 1.0])), query]).astype(np.float32)
    scores, ids = QueryExpansion(k=5, alpha=0.0).search(_Exact(gallery), query[None].astype(np.float32), 6)
    assert list(ids[0, :2]) == [3, 5] and sorted(ids[0, 2:5]) == [0, 1, 2] and ids[0, 5] == 4
    np.testing.assert_allclose(scores[0], gallery[ids[0]] @ query, atol=1e-6)  # cosines with the query


@pytest.mark.parametrize(("stored", "passing"), [(30, None), (6, None), (2000, 50), (6, 2)])
def test_kreciprocal_returns_every_item_when_fewer_than_its_shortlist_exist_or_pass(stored, passing):
    """Issue 47.1: padding ids (-1) made a weight sum zero, the NaN spread to the real items and the padding sorted
    first: a 30-item index returned 1 of 10 results, 2,000 items with a filter that 50 pass returned none."""
    from retrieval.index import SearchIndex
    from retrieval.index.filter_language import parse_where
    from retrieval.index.gallery import IndexGallery

    vectors, _ = clustered_unit_vectors(stored, dim=16, n_clusters=4, seed=5)
    index = SearchIndex.build(vectors, {"group": [int(i < (passing or stored)) for i in range(stored)]}, kind="flat")
    where = parse_where("group = 1") if passing else None
    k, found = min(10, stored), min(10, passing or stored)
    queries = vectors[:2]  # stored items that pass the filter
    for method in (KReciprocal(), KReciprocal(k1=10, k2=3, lam=0.1)):
        scores, ids = method.search(IndexGallery(index, where), queries, k)
        assert (ids[:, :found] >= 0).all() and (ids[:, found:] == -1).all(), method.spec()
        assert ids[:, 0].tolist() == [0, 1]  # each query's own image first
        assert np.isfinite(scores[:, :found]).all()
        assert all(len(set(row[:found])) == found for row in ids.tolist())
