"""Recall against exact search counts tied items as equal: in `evaluate`, in tuning and in the build's measurement."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from retrieval.index import SearchIndex
from retrieval.index.tuning import exact_search, measure, recall_at_k, tie_tolerance, tune_search_parameters


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _collapsed(n: int = 1200, dim: int = 32) -> np.ndarray:
    """A collapsed model's embeddings: every vector the same."""
    return np.full((n, dim), 1 / np.sqrt(dim), dtype=np.float32)


def _pairs(n: int = 1200, dim: int = 32, seed: int = 0) -> np.ndarray:
    """Random unit vectors, each stored twice (exact duplicates), in shuffled order."""
    half = _unit(np.random.default_rng(seed).standard_normal((n // 2, dim)))
    return np.concatenate([half, half])[np.random.default_rng(seed + 1).permutation(n)]


def test_recall_counts_a_found_item_tied_with_the_kth_true_one():
    truth, truth_scores = np.array([[0, 1, 2]]), np.array([[0.9, 0.5, 0.5]])
    found = np.array([[0, 7, 8]])
    assert recall_at_k(found, truth, 3) == pytest.approx(1 / 3)  # ids only
    assert recall_at_k(found, truth, 3, np.array([[0.9, 0.5, 0.4]]), truth_scores) == pytest.approx(2 / 3)
    assert recall_at_k(found, truth, 3, np.array([[0.9, 0.5, 0.5 - 1e-7]]), truth_scores, 1e-6) == 1.0
    # a row never counts more hits than it has true ids, and -1 never counts
    assert recall_at_k(np.array([[5, 6, -1]]), np.array([[0, -1, -1]]), 3, np.ones((1, 3)), np.ones((1, 3))) == 1.0
    assert recall_at_k(np.array([[-1, -1, -1]]), truth, 3, np.ones((1, 3)), truth_scores) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("vectors", [_collapsed(), _pairs()], ids=["collapsed", "duplicates"])
def test_an_exact_index_recalls_everything_whatever_ties_it_holds(vectors):
    index = SearchIndex.build(vectors, kind="flat", progress=False)
    assert index.evaluate(k=10).recall_at_k == 1.0  # leave-one-out over the stored vectors
    assert index.evaluate(vectors[:50] + 0.0).recall_at_k == 1.0  # given queries
    assert index.manifest.measured.recall_at_k == 1.0  # the build's held-out vectors


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
@pytest.mark.parametrize("vectors", [_collapsed(), _pairs()], ids=["collapsed", "duplicates"])
def test_the_recall_tuning_reaches_is_the_recall_measured(kind, vectors):
    """Built to the default 0.95: the build's measurement on its held-out vectors reaches it, and `evaluate`
    agrees; tuning by hand claims exactly what `measure` then measures."""
    options = {"nlist": 16} if kind == "ivf" else {}
    built = SearchIndex.build(vectors, kind=kind, progress=False, **options)
    assert built.manifest.measured.recall_at_k >= built.manifest.target_recall == 0.95
    assert built.evaluate(k=10).recall_at_k >= 0.95

    stored, queries = vectors[200:], vectors[:200]
    index = faiss.index_factory(
        vectors.shape[1], "HNSW32,Flat" if kind == "hnsw" else "IVF16,Flat", faiss.METRIC_INNER_PRODUCT
    )
    index.train(stored)
    index.add(stored)
    true_scores, true_ids = exact_search(stored, queries, 10)
    checked = (stored[:300], np.arange(300))  # stored vectors must find themselves, or a copy tied with them
    parameters, claimed = tune_search_parameters(index, queries, true_ids, 0.95, 10, checked, true_scores=true_scores)
    measured = measure(lambda q, k: index.search(q, k), queries, true_ids, 10, true_scores)
    assert measured.recall_at_k == claimed >= 0.95


def test_tie_tolerance_covers_two_summation_orders():
    """The same inner products from FAISS's BLAS search and from its per-pair kernel differ by less than it."""
    rng = np.random.default_rng(3)
    vectors = _unit(rng.standard_normal((2000, 512)))
    queries = _unit(rng.standard_normal((64, 512)))
    blas, ids = exact_search(vectors, queries, 50)
    single = np.stack([exact_search(vectors, queries[i : i + 1], 50)[0][0] for i in range(len(queries))])
    assert np.abs(blas - single).max() <= tie_tolerance(512)


def test_the_build_line_never_claims_a_target_the_measurement_falls_short_of():
    from retrieval.cli.index_build import _tuning_line

    manifest = SearchIndex.build(_pairs(), kind="hnsw", progress=False).manifest
    assert _tuning_line(manifest).endswith("(tuned to recall@10 0.95, the default target)")
    short = manifest.model_copy(update={"measured": manifest.measured.model_copy(update={"recall_at_k": 0.747})})
    line = _tuning_line(short)
    assert "(the most accurate explored: recall@10 0.7470, short of the default target 0.95)" in line
    assert "tuned to" not in line
