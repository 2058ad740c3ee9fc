"""The learned re-ranker's blend (`retrieval.core.learned_rerank`): the guarantees of every re-ranking method.

Exactly min(k, items passing the filter) results, finite scores in descending order, an image in the index
first for its own query (over plain vectors: over dba the index holds averages), w = 0 the plain search; and
the re-ranker directory's checks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from retrieval.core.learned_rerank import MANIFEST_FILE, Blend, read_reranker
from retrieval.core.rerank import IDENTICAL_SCORE, DatabaseAugmentation
from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.index.filter_language import parse_where
from retrieval.index.gallery import IndexGallery
from tests.properties import examples


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.maximum(np.linalg.norm(rows, axis=-1, keepdims=True), 1e-6)).astype(np.float32)


def _random_probabilities(seed: int):
    """A pair model that answers any probability in [0, 1], saturated ones included, the same for the same pair."""

    def probabilities(ids: np.ndarray, cosines: np.ndarray) -> np.ndarray:
        assert ids.shape == cosines.shape
        noise = np.random.default_rng([seed, *np.maximum(ids, 0).ravel().tolist()]).random(ids.shape)
        return np.where(noise < 0.1, 1.0, np.where(noise > 0.9, 0.0, noise))

    return probabilities


@pytest.mark.property
@examples(0.1)
@example(items=8, dim=2, k=1, depth=1, weight=0.0, kept_labels=set(), duplicates=0, seed=8, base=None)  # a tie
@given(
    items=st.integers(1, 40),
    dim=st.integers(2, 8),
    k=st.integers(1, 50),
    depth=st.integers(1, 60),
    weight=st.sampled_from([0.0, 0.25, 0.5, 1.0]) | st.floats(0, 1),
    kept_labels=st.sets(st.integers(0, 3)),
    duplicates=st.integers(0, 3),
    seed=st.integers(0, 2**16),
    base=st.none() | st.builds(DatabaseAugmentation, k=st.integers(1, 6), alpha=st.sampled_from([0.0, 1.0, 3.0])),
)
def test_blended_search_keeps_the_guarantees_of_every_reranker(
    items, dim, k, depth, weight, kept_labels, duplicates, seed, base
):
    rng = np.random.default_rng(seed)
    vectors = _unit(rng.standard_normal((items, dim)))
    vectors = np.vstack([vectors, np.repeat(vectors[:1], duplicates, axis=0)])  # copies of item 0
    labels = rng.integers(0, 4, len(vectors))
    stored = vectors if base is None else base.database(vectors)  # over dba: the averaged vectors, as index build
    index = SearchIndex.build(stored, {"label": labels.tolist()}, kind="flat", progress=False)
    where = parse_where(f"label in ({', '.join(map(str, sorted(kept_labels)))})") if kept_labels else None
    passing = np.flatnonzero(np.isin(labels, sorted(kept_labels))) if kept_labels else np.arange(len(vectors))
    queries = vectors[rng.integers(0, len(vectors), 3)]
    scores, ids = Blend(depth, weight).search(IndexGallery(index, where), queries, k, _random_probabilities(seed))
    assert ids.shape == scores.shape == (3, k)
    expected = min(k, len(passing))
    assert ((ids >= 0).sum(axis=1) == expected).all()
    assert (ids[:, expected:] == -1).all()
    found = scores[:, :expected]
    assert np.isfinite(found).all() and (np.diff(found, axis=1) <= 0).all()
    for row in range(3):
        assert np.isin(ids[row, :expected], passing).all() and len(set(ids[row, :expected])) == expected
        if base is not None:
            continue  # the index holds each image's average with its neighbours, not the image's own vector
        # The query's own image first, with what scores as identical to it (IDENTICAL_SCORE): at the long profile
        # another item within float32 rounding of the query tied with it and came first by its smaller id.
        identical = [item for item in passing if vectors[item] @ queries[row] >= IDENTICAL_SCORE]
        first = ids[row, : min(len(identical), expected)]
        assert (vectors[first] @ queries[row] >= IDENTICAL_SCORE).all()


def test_weight_zero_is_the_plain_search_and_never_runs_the_pair_model():
    rng = np.random.default_rng(0)
    vectors = _unit(rng.standard_normal((50, 8)))
    index = SearchIndex.build(vectors, {"label": [0] * 50}, kind="flat", progress=False)

    def refuse(ids: np.ndarray, cosines: np.ndarray) -> np.ndarray:
        raise AssertionError("the pair model ran at w = 0")

    plain_scores, plain_ids = index.search(vectors[:5], 10)
    scores, ids = Blend(20, 0.0).search(IndexGallery(index), vectors[:5], 10, refuse)
    np.testing.assert_array_equal(ids, plain_ids)
    np.testing.assert_allclose(scores, plain_scores, atol=1e-6)


def test_the_pair_model_reorders_the_first_n_and_the_rest_follow_below_them():
    scores = np.array([[0.9, 0.8, 0.7, 0.6]], dtype=np.float32)
    ids = np.array([[10, 11, 12, 13]])
    blended, order = Blend(depth=3, weight=1.0).rescore(scores, ids, np.array([[0.1, 0.2, 0.9]]))
    assert order.tolist() == [[12, 11, 10, 13]]
    np.testing.assert_allclose(blended[0], [0.9, 0.2, 0.1, 0.1])  # past N: the lowest p of the N
    half, order = Blend(depth=3, weight=0.5).rescore(scores, ids, np.array([[0.1, 0.2, 0.9]]))
    assert order.tolist() == [[12, 11, 10, 13]]
    np.testing.assert_allclose(half[0], [0.8, 0.5, 0.5, 0.35], atol=1e-6)


def test_a_blend_refuses_a_depth_below_one_and_a_weight_outside_0_1():
    for depth, weight in ((0, 0.5), (5, -0.1), (5, 1.5)):
        with pytest.raises(ValueError):
            Blend(depth, weight)


def test_a_directory_without_manifest_or_with_a_changed_file_is_refused(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_reranker(tmp_path / "none")
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({"format": 99}))
    with pytest.raises(UserError, match="has format 99, this version reads 1"):
        read_reranker(tmp_path)
