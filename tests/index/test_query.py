"""`search_matches`, the one query pipeline of `index query` and `serve`, and `QueryMatch`, its one result record."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrieval.core.rerank import rerank_at_query
from retrieval.index import SearchIndex
from retrieval.index.filter_language import parse_where
from retrieval.index.gallery import IndexGallery
from retrieval.index.query import LearnedRanking, QueryMatch, search_matches
from tests.index.index_oracle import brute_force
from tests.properties import examples

N, DIM = 6, 8
VECTORS = np.random.default_rng(0).normal(size=(N, DIM)).astype(np.float32)
VECTORS /= np.linalg.norm(VECTORS, axis=1, keepdims=True)
METADATA = pa.table(
    {
        "path": [f"/images/{i}.png" for i in range(N)],
        "label": ["a", "b"] * (N // 2),
        "price": [10.5 * i for i in range(N)],
        "stock": [None, *range(1, N)],
    }
)


@pytest.fixture(scope="module")
def index() -> SearchIndex:
    return SearchIndex.build(VECTORS, METADATA, kind="flat", progress=False)


def test_padding_is_dropped_and_each_match_holds_its_whole_row(index: SearchIndex) -> None:
    (matches,) = search_matches(index, VECTORS[:1], k=10)
    scores, ids = index.search(VECTORS[:1], k=10)
    assert (ids[0] < 0).sum() == 10 - N and len(matches) == N  # FAISS's -1 padding is not a match
    assert [match.rank for match in matches] == list(range(1, N + 1))
    assert [match.id for match in matches] == ids[0][:N].tolist()
    np.testing.assert_array_equal([match.score for match in matches], scores[0][:N])
    assert [match.row for match in matches] == index.metadata_for(ids[0][:N])  # every column, nulls too


def test_the_json_layout_puts_rank_and_score_first_then_the_row_and_reads_back(index: SearchIndex) -> None:
    (matches,) = search_matches(index, VECTORS[2:3], k=2)
    dumped = matches[0].model_dump()
    assert list(dumped) == ["rank", "score", "id", "path", "label", "price", "stock"]
    assert (dumped["rank"], dumped["score"], dumped["id"], dumped["price"]) == (1, matches[0].score, 2, 21.0)
    assert QueryMatch.model_validate(json.loads(matches[0].model_dump_json())) == matches[0]
    assert QueryMatch(rank=1, score=0.5, id=7, row=3).row == {"id": 7, "row": 3}


def test_a_filter_and_each_re_ranking_go_through_the_same_pipeline(index: SearchIndex) -> None:
    where = parse_where("label = 'b'")
    (filtered,) = search_matches(index, VECTORS[:1], 10, where)
    _, ids = index.search(VECTORS[:1], 10, filter=where)
    assert [match.id for match in filtered] == ids[0][ids[0] >= 0].tolist()
    assert sorted(match.id for match in filtered) == [1, 3, 5]  # every item passing, and only those
    expansion = rerank_at_query("qe:k=2,alpha=3")
    (expanded,) = search_matches(index, VECTORS[:1], 4, where, reranker=expansion)
    scores, ids = expansion.search(IndexGallery(index, where), VECTORS[:1], 4)
    assert [(match.id, match.score) for match in expanded] == [
        (int(i), float(s)) for s, i in zip(scores[0], ids[0], strict=True) if i >= 0
    ]


class _Learned:
    """A learned re-ranker that answers fixed results and keeps the image paths it was given to read."""

    def __init__(self) -> None:
        self.paths: list[object] = []

    def search(self, gallery, queries, descriptors, k, paths_of):
        self.paths = list(paths_of(np.array([4, 0])))
        return np.array([[0.9, 0.4, -np.inf]]), np.array([[4, 0, -1]])


def test_a_learned_re_ranker_reads_the_results_paths_and_orders_the_matches(index: SearchIndex) -> None:
    learned = _Learned()
    (matches,) = search_matches(index, VECTORS[:1], 3, learned=LearnedRanking(learned, np.zeros((1, 4))))
    assert learned.paths == ["/images/4.png", "/images/0.png"]
    assert [(match.rank, match.id, match.score) for match in matches] == [(1, 4, 0.9), (2, 0, 0.4)]
    with pytest.raises(ValueError, match="one re-ranking"):
        search_matches(index, VECTORS[:1], 3, reranker=rerank_at_query("qe"), learned=LearnedRanking(learned, None))


@pytest.mark.property
@examples(0.5)
@given(n=st.integers(1, 40), k=st.integers(1, 60), seed=st.integers(0, 2**32 - 1))
def test_the_matches_are_the_exact_neighbours_with_their_rows(n: int, k: int, seed: int) -> None:
    """Over a flat index of any size, k below or above it: the brute-force neighbours, ranked 1.., each with its row."""
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.normal(size=(3, 4)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    index = SearchIndex.build(vectors, pa.table({"path": [f"{i}.png" for i in range(n)]}), kind="flat", progress=False)
    truth = brute_force(vectors, np.arange(n), queries, min(k, n))
    for row, matches in enumerate(search_matches(index, queries, k)):
        assert [match.rank for match in matches] == list(range(1, min(k, n) + 1))
        scores = [match.score for match in matches]
        assert scores == sorted(scores, reverse=True)
        np.testing.assert_allclose(scores, (queries[row] @ vectors[truth[row]].T), atol=1e-5)
        assert [match.column("path") for match in matches] == [f"{match.id}.png" for match in matches]
