"""Filtered search against a numpy brute force over the passing rows, at 50%, 5% and 0.1% selectivity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.index import SearchIndex, filtered_search
from retrieval.index.filter_language import Filter, parse_filter, parse_where
from tests.index.index_oracle import KINDS, N, brute_force, overlap

TARGET = 0.9
TOLERANCE = 0.02
# bucket is a permutation of 0..N-1, so `bucket < n` passes exactly n rows: 50%, 5% and 0.1% (4 rows) of N.
# shop is 'a' for even buckets, so the 5% filter tests two conditions.
SELECTIVE = {"50%": "bucket < 2000", "5%": "bucket < 400 and shop = 'a'", "0.1%": "bucket < 4"}


@pytest.fixture(scope="module")
def indexes(data) -> dict[str, SearchIndex]:
    vectors, queries = data
    bucket = np.random.default_rng(7).permutation(N)
    table = {"bucket": bucket.tolist(), "shop": np.where(bucket % 2 == 0, "a", "b").tolist()}
    return {
        kind: SearchIndex.build(
            vectors,
            table,
            kind=kind,
            tuning_queries=queries,
            target_recall=None if kind == "flat" else TARGET,
            progress=False,
        )
        for kind in KINDS
    }


def passing_rows(index: SearchIndex, where: str) -> np.ndarray:
    """Ids passing `where`, by a plain Python loop over the metadata rows (independent of `Filter.mask`)."""
    rows = index.metadata_for(index.ids)
    conditions = parse_where(where).conditions
    tests = {"lt": lambda a, b: a < b, "eq": lambda a, b: a == b}
    return np.array([r["id"] for r in rows if all(tests[c.op](r[c.column], c.value) for c in conditions)])


def filtered_truth(vectors: np.ndarray, queries: np.ndarray, passing: np.ndarray, k: int) -> np.ndarray:
    truth = brute_force(vectors[passing], passing, queries, k)
    return np.hstack([truth, np.full((len(queries), k - truth.shape[1]), -1)])


@pytest.mark.parametrize("share", SELECTIVE)
def test_flat_returns_the_exact_top_k_among_passing_items(share: str, indexes, data) -> None:
    vectors, queries = data
    index = indexes["flat"]
    passing = passing_rows(index, SELECTIVE[share])
    assert len(passing) == {"50%": 2000, "5%": 200, "0.1%": 4}[share]
    scores, ids = index.search(queries, k=10, filter=parse_where(SELECTIVE[share]))
    np.testing.assert_array_equal(ids, filtered_truth(vectors, queries, passing, 10))
    found = ids >= 0
    expected = np.einsum("qd,qkd->qk", queries, vectors[np.maximum(ids, 0)])
    np.testing.assert_allclose(scores[found], expected[found], atol=1e-5)
    assert np.all(scores[~found] == -np.inf)


@pytest.mark.parametrize("approximate", [False, True], ids=["exact-below-20k", "selector-in-ann"])
@pytest.mark.parametrize("share", SELECTIVE)
@pytest.mark.parametrize("kind", ["hnsw", "ivf", "ivfpq"])
def test_approximate_kinds_keep_the_tuned_recall_among_passing_items(
    kind: str, share: str, approximate: bool, indexes, data, monkeypatch
) -> None:
    if approximate:  # the widened approximate path, which otherwise needs more than 20,000 passing items
        monkeypatch.setattr(filtered_search, "EXACT_MAX_PASSING", 0)
    vectors, queries = data
    index = indexes[kind]
    passing = passing_rows(index, SELECTIVE[share])
    _, ids = index.search(queries, k=10, filter=parse_where(SELECTIVE[share]))
    assert np.isin(ids[ids >= 0], passing).all()
    assert (ids >= 0).sum(axis=1).min() == min(10, len(passing))
    truth = filtered_truth(vectors, queries, passing, 10)
    unfiltered = overlap(index.search(queries, k=10)[1], brute_force(vectors, np.arange(N), queries, 10))
    recall = overlap(np.where(ids < 0, -2, ids), truth) * 10 / min(10, len(passing))  # -1 pads match nothing
    assert recall >= TARGET - TOLERANCE and recall >= unfiltered - TOLERANCE


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivfpq"])
def test_filters_never_return_removed_or_failing_ids_and_see_added_ones(kind: str, data) -> None:
    vectors, queries = data
    index = SearchIndex.build(vectors[:3000], {"shop": ["a", "b"] * 1500}, kind=kind, progress=False)
    shop_a = parse_filter({"shop": "a"})
    removed = index.search(queries, k=10, filter=shop_a)[1][:, :3].ravel()
    index.remove(np.unique(removed))
    added = index.add(queries, {"shop": ["a"] * len(queries)})  # each query's own vector now passes and is best
    _, ids = index.search(queries, k=10, filter=shop_a)
    assert not np.isin(ids, removed).any()
    np.testing.assert_array_equal(ids[:, 0], added)
    assert {row["shop"] for row in index.metadata_for(ids.ravel())} == {"a"}


def test_no_passing_item_gives_padding_and_bad_filters_are_user_errors(indexes, data) -> None:
    _, queries = data
    index = indexes["hnsw"]
    scores, ids = index.search(queries[:3], k=5, filter=parse_where("bucket < 0"))
    assert (ids == -1).all() and (scores == -np.inf).all()
    with pytest.raises(UserError, match=r"filter column 'price' is not in the metadata; columns: id, bucket, shop"):
        index.search(queries, filter=parse_where("price < 3"))
    with pytest.raises(UserError, match="compares it with a string"):
        index.search(queries, filter=parse_where("bucket = '3'"))
    np.testing.assert_array_equal(index.search(queries, 10, filter=Filter())[1], index.search(queries, 10)[1])


def test_a_memory_mapped_index_filters_the_same(indexes, data, tmp_path: Path) -> None:
    _, queries = data
    indexes["ivfpq"].save(tmp_path / "gallery")
    mapped = SearchIndex.load(tmp_path / "gallery", mmap=True)
    where = parse_where(SELECTIVE["5%"])
    np.testing.assert_array_equal(
        mapped.search(queries, 10, filter=where)[1], indexes["ivfpq"].search(queries, 10, filter=where)[1]
    )
