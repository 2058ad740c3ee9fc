"""The FAISS kNN graph against a brute-force numpy oracle, exact and IVF, and its cleanlab form."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.audit import knn_graph as knn_graph_module
from retrieval.audit.knn_graph import build_knn_graph, graph_recall


def _unit(n: int, dim: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_exact_graph_matches_brute_force_and_never_holds_the_row_itself():
    vectors = _unit(200, 8)
    graph = build_knn_graph(vectors, k=5, progress=False)
    scores = vectors @ vectors.T
    np.fill_diagonal(scores, -np.inf)
    expected = np.argsort(-scores, axis=1)[:, :5]
    assert graph.exact
    assert (graph.neighbours == expected).all()
    np.testing.assert_allclose(graph.scores, np.take_along_axis(scores, expected, axis=1), atol=1e-5)
    assert not (graph.neighbours == np.arange(200)[:, None]).any()


def test_exact_duplicates_drop_self_even_when_it_ties_behind_its_copy():
    vectors = _unit(50, 8)
    vectors[7] = vectors[3]
    graph = build_knn_graph(vectors, k=3, progress=False)
    assert graph.neighbours[3, 0] == 7 and graph.neighbours[7, 0] == 3
    assert graph.scores[3, 0] == pytest.approx(1.0, abs=1e-6)
    assert not (graph.neighbours == np.arange(50)[:, None]).any()


def test_cleanlab_graph_is_sorted_euclidean_distances_with_explicit_zeros():
    vectors = _unit(40, 6)
    vectors[1] = vectors[0]
    graph = build_knn_graph(vectors, k=4, progress=False)
    matrix = graph.cleanlab_graph()
    distances = matrix.data.reshape(40, 4)
    assert (np.diff(distances, axis=1) >= -1e-9).all()
    assert distances[0, 0] == 0.0 and matrix.nnz == 40 * 4  # the zero distance is stored
    row, col = 5, graph.neighbours[5, 0]
    assert distances[5, 0] == pytest.approx(np.linalg.norm(vectors[row] - vectors[col]), abs=1e-5)


def test_ivf_graph_above_the_exact_limit_has_high_recall(monkeypatch):
    monkeypatch.setattr(knn_graph_module, "EXACT_LIMIT", 500)
    centres = _unit(20, 16, seed=1)
    vectors = centres[np.arange(3000) % 20] + 0.3 * _unit(3000, 16, seed=2)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    graph = build_knn_graph(vectors.astype(np.float32), k=5, progress=False)
    assert not graph.exact
    assert (graph.neighbours >= 0).all()
    assert graph_recall(graph, vectors, sample=300) > 0.9


def test_k_outside_range_is_a_value_error():
    with pytest.raises(ValueError, match=r"k must be in \[1, N - 1\]"):
        build_knn_graph(_unit(5, 4), k=5)
