"""Mining a re-ranker's training pairs from the embedder's own neighbours (`retrieval.reranker.mining`)."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.reranker.mining import mine_pairs


def test_each_image_pairs_with_its_nearest_others_never_itself():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((30, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    labels = np.arange(30) % 3
    pairs = mine_pairs(vectors, labels, depth=5)
    assert len(pairs.targets) == 30 * 5 and (pairs.queries != pairs.results).all()
    for query in range(30):
        nearest = np.argsort(-(vectors @ vectors[query]))[1:6]
        assert set(pairs.results[pairs.queries == query]) == set(nearest)
    np.testing.assert_array_equal(pairs.targets, labels[pairs.queries] == labels[pairs.results])
    expected = np.einsum("nd,nd->n", vectors[pairs.queries], vectors[pairs.results])
    np.testing.assert_allclose(pairs.cosines, expected, atol=1e-6)


def test_unreadable_rows_take_no_part_and_duplicates_still_drop_the_image_itself():
    vectors = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [np.nan, np.nan], [0, 1]], dtype=np.float32)
    pairs = mine_pairs(vectors, np.array([0, 0, 1, 1, 0, 1]), depth=2)
    assert 4 not in pairs.queries and 4 not in pairs.results
    assert (pairs.queries != pairs.results).all()


def test_pairs_of_one_kind_only_are_refused():
    vectors = np.eye(4, dtype=np.float32)
    with pytest.raises(UserError, match="hold no matching pair"):
        mine_pairs(vectors, np.arange(4), depth=2)
    with pytest.raises(UserError, match="multi-label"):
        mine_pairs(vectors, np.ones((4, 2), bool), depth=2)
