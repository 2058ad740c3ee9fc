"""Mining a re-ranker's training pairs from the embedder's own neighbours (`retrieval.reranker.mining`)."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.reranker.mining import mine_pairs


def test_each_image_pairs_with_its_nearest_matches_and_nearest_non_matches_never_itself():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((30, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    labels = np.arange(30) % 3
    pairs = mine_pairs(vectors, labels, depth=5)
    assert len(pairs.targets) == 30 * 10 and (pairs.queries != pairs.results).all()
    for query in range(30):
        order = [row for row in np.argsort(-(vectors @ vectors[query])) if row != query]
        matches = [row for row in order if labels[row] == labels[query]][:5]
        others = [row for row in order if labels[row] != labels[query]][:5]
        assert set(pairs.results[pairs.queries == query]) == set(matches) | set(others)
    np.testing.assert_array_equal(pairs.targets, labels[pairs.queries] == labels[pairs.results])
    assert pairs.positives == 150
    expected = np.einsum("nd,nd->n", vectors[pairs.queries], vectors[pairs.results])
    np.testing.assert_allclose(pairs.cosines, expected, atol=1e-6)


def test_non_matches_are_mined_even_where_every_plain_neighbour_matches():
    # Two tight clusters, one per class: each image's 3 nearest others are all matches.
    vectors = np.array([[1, 0.01 * i] for i in range(5)] + [[0.01 * i, 1] for i in range(5)], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    labels = np.repeat([7, 9], 5)
    pairs = mine_pairs(vectors, labels, depth=3)
    negatives = pairs.targets == 0
    assert negatives.sum() == 10 * 3
    assert (labels[pairs.queries[negatives]] != labels[pairs.results[negatives]]).all()


def test_a_small_class_gives_the_matches_it_has():
    vectors = np.eye(5, dtype=np.float32)
    pairs = mine_pairs(vectors, np.array([0, 0, 1, 1, 1]), depth=4)
    assert pairs.positives == 2 * 1 + 3 * 2
    assert len(pairs.targets) - pairs.positives == 2 * 3 + 3 * 2


def test_unreadable_rows_take_no_part_and_duplicates_still_drop_the_image_itself():
    vectors = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [np.nan, np.nan], [0, 1]], dtype=np.float32)
    pairs = mine_pairs(vectors, np.array([0, 0, 1, 1, 0, 1]), depth=2)
    assert 4 not in pairs.queries and 4 not in pairs.results
    assert (pairs.queries != pairs.results).all()


def test_pairs_of_one_kind_only_are_refused():
    vectors = np.eye(4, dtype=np.float32)
    with pytest.raises(UserError, match="share a class"):
        mine_pairs(vectors, np.arange(4), depth=2)
    with pytest.raises(UserError, match="same class"):
        mine_pairs(vectors, np.zeros(4, int), depth=2)
    with pytest.raises(UserError, match="multi-label"):
        mine_pairs(vectors, np.ones((4, 2), bool), depth=2)


def test_mining_works_beside_faiss_torch_utils():
    """pytorch-metric-learning imports faiss.contrib.torch_utils, whose `search` takes no `params`: CI's workers
    import it before the mining tests in some orders (the selector searches failed there). Importing it here
    patches this worker's FAISS as those tests do; everything in the toolkit must work beside it."""
    import faiss.contrib.torch_utils  # noqa: F401

    vectors = np.eye(6, dtype=np.float32)
    pairs = mine_pairs(vectors, np.array([0, 0, 0, 1, 1, 1]), depth=2)
    assert pairs.positives == 6 * 2 and len(pairs.targets) == 6 * 4
