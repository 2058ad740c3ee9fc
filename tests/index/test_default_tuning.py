"""Approximate kinds built without a recall target are tuned to the default one, on held-out vectors."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from retrieval.index import DEFAULT_TARGET_RECALL, SearchIndex
from retrieval.index.tuning import tune_search_parameters
from tests.index.index_oracle import brute_force, overlap


def _random_unit(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def random_vectors() -> tuple[np.ndarray, np.ndarray]:
    """5,000 random unit vectors (the hardest case for IVF: no clusters) and 200 fresh queries."""
    return _random_unit(5000, 128, seed=0), _random_unit(200, 128, seed=1)


def test_ivf_over_random_vectors_reaches_the_default_target_without_being_asked(random_vectors) -> None:
    vectors, queries = random_vectors
    truth = brute_force(vectors, np.arange(len(vectors)), queries, 10)
    untuned = SearchIndex.build(vectors, kind="ivf", default_target_recall=None, progress=False)
    assert untuned.manifest.target_recall is None and untuned.manifest.search_parameters == {"nprobe": 16}
    assert overlap(untuned.search(queries, 10)[1], truth) < 0.7  # the fixed nprobe misses about half

    index = SearchIndex.build(vectors, kind="ivf", progress=False)
    assert overlap(index.search(queries, 10)[1], truth) >= 0.95
    assert index.manifest.target_recall == DEFAULT_TARGET_RECALL == 0.95
    assert index.manifest.target_recall_source == "default"
    assert index.manifest.measured.recall_at_k >= 0.95  # on the 500 build vectors held out to tune


def test_a_given_target_is_recorded_as_given_and_exact_kinds_have_no_target(random_vectors) -> None:
    vectors, _ = random_vectors
    given = SearchIndex.build(vectors, kind="ivf", target_recall=0.5, progress=False)
    assert given.manifest.target_recall == 0.5 and given.manifest.target_recall_source == "given"
    assert given.manifest.search_parameters["nprobe"] < 128  # cheaper than scanning every list
    flat = SearchIndex.build(vectors[:100], kind="flat", progress=False)
    assert flat.manifest.target_recall is None and flat.manifest.target_recall_source is None


def test_best_effort_tuning_takes_the_most_accurate_setting_instead_of_raising(random_vectors) -> None:
    vectors, queries = random_vectors
    index = faiss.index_factory(128, "IVF64,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    truth = brute_force(vectors, np.arange(len(vectors)), queries, 10)
    partly_findable = truth.copy()
    partly_findable[:, 5:] = len(vectors) + 1  # half of each row is an id no setting can return
    parameters, recall = tune_search_parameters(index, queries, partly_findable, 0.95, best_effort=True)
    assert parameters == {"nprobe": 64} and recall == pytest.approx(0.5)  # every list scanned: the most there is
