"""`SearchIndex` against a numpy brute-force oracle: every kind, tuning, ids, metadata, updates."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa
import pytest

from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.index.tuning import tune_search_parameters
from tests.index.index_oracle import KINDS, N, brute_force, overlap


def build(kind: str, data, metadata=None, **options) -> SearchIndex:
    vectors, queries = data
    return SearchIndex.build(vectors, metadata, kind=kind, tuning_queries=queries, progress=False, **options)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_finds_the_oracle_neighbours_with_exact_scores(kind: str, data) -> None:
    vectors, queries = data
    index = build(kind, data, target_recall=0.95)
    scores, ids = index.search(queries, k=10)
    assert scores.dtype == np.float32 and ids.dtype == np.int64 and ids.shape == (len(queries), 10)
    truth = brute_force(vectors, np.arange(N), queries, 10)
    recall = overlap(ids, truth)
    assert recall == 1.0 if kind == "flat" else recall >= 0.95
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, vectors[ids]), atol=1e-5)
    assert np.all(np.diff(scores, axis=1) <= 1e-6)
    assert index.manifest.factory == index.factory and index.kind == kind


@pytest.mark.parametrize("kind", ["hnsw", "ivf", "ivfpq"])
def test_target_recall_is_reached_on_held_out_queries_at_the_cheapest_setting(kind: str, data) -> None:
    vectors, queries = data
    truth = brute_force(vectors, np.arange(N), queries, 10)
    loose, strict = build(kind, data, target_recall=0.7), build(kind, data, target_recall=0.98)
    for index, target in ((loose, 0.7), (strict, 0.98)):
        recall = overlap(index.search(queries, 10)[1], truth)
        assert recall >= target
        assert index.manifest.measured.recall_at_k == pytest.approx(recall, abs=1e-4)
        assert index.manifest.target_recall == target
    name = "efSearch" if kind == "hnsw" else "nprobe"
    assert loose.manifest.search_parameters[name] <= strict.manifest.search_parameters[name]


def test_an_unreachable_or_invalid_recall_target_says_so(data) -> None:
    vectors, queries = data
    index = faiss.index_factory(32, "IVF16,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add(vectors)
    unfindable = np.full((len(queries), 10), N + 1, dtype=np.int64)  # labels no index could return
    with pytest.raises(UserError, match=r"no search setting reaches recall@10 0.5 with 99.9% .* \(best recall 0.0000"):
        tune_search_parameters(index, queries, unfindable, 0.5)
    with pytest.raises(UserError, match=r"target recall must be in \(0, 1\]"):
        build("ivf", data, target_recall=1.5)


@pytest.mark.parametrize("kind", KINDS)
def test_each_stored_vector_finds_its_own_id_first(kind: str, data) -> None:
    vectors, _ = data
    index = build(kind, data, target_recall=0.95)
    _, ids = index.search(vectors, k=1)
    assert np.mean(ids[:, 0] == np.arange(N)) >= 0.999


@pytest.mark.parametrize("kind", KINDS)
def test_ids_and_metadata_survive_add_remove_save_and_load(kind: str, data, metadata, tmp_path) -> None:
    vectors, queries = data
    index = build(kind, data, metadata)
    new = index.add(queries[:5], {"path": [f"new{i}.png" for i in range(5)], "label": ["fresh"] * 5})
    np.testing.assert_array_equal(new, np.arange(N, N + 5))
    assert index.remove([3, N + 4, N + 4]) == 2
    assert index.ntotal == N + 3
    _, ids = index.search(np.vstack([vectors[3], queries[4], queries[1]]), k=5)
    assert 3 not in ids and N + 4 not in ids and ids[2, 0] == N + 1
    with pytest.raises(UserError, match="unknown id"):
        index.metadata_for([3])
    with pytest.raises(UserError, match="unknown id"):
        index.remove([N + 4])

    before = index.search(queries, k=10)
    index.save(tmp_path / "index")
    loaded = SearchIndex.load(tmp_path / "index")
    after = loaded.search(queries, k=10)
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_allclose(before[0], after[0])
    assert loaded.metadata_for([N + 1, 7]) == [
        {"id": N + 1, "path": "new1.png", "label": "fresh"},
        {"id": 7, "path": "images/00007.png", "label": "class7"},
    ]
    np.testing.assert_array_equal(loaded.add(queries[5:6]), [N + 5])  # the removed N + 4 is never reused
    assert loaded.metadata_for([N + 5]) == [{"id": N + 5, "path": None, "label": None}]


@pytest.mark.parametrize("kind", KINDS)
def test_reconstruct_returns_the_stored_vector(kind: str, data) -> None:
    vectors, queries = data
    index = build(kind, data)
    new_id = int(index.add(queries[:1])[0])
    np.testing.assert_allclose(index.reconstruct(17), vectors[17], atol=1e-6)
    np.testing.assert_allclose(index.reconstruct(new_id), queries[0], atol=1e-6)
    with pytest.raises(UserError, match="unknown id"):
        index.reconstruct(10**9)


@pytest.mark.parametrize("kind", ["ivf", "ivfpq"])
def test_add_reuses_the_trained_quantizer(kind: str, data) -> None:
    vectors, queries = data
    index = build(kind, data)
    ivf = faiss.extract_index_ivf(index._index)
    centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist)
    index.add(np.vstack([queries] * 3))
    np.testing.assert_array_equal(ivf.quantizer.reconstruct_n(0, ivf.nlist), centroids)
    truth = brute_force(np.vstack([vectors, *[queries] * 3]), np.arange(N + 3 * len(queries)), queries, 1)
    own = N + (truth[:, 0] - N) % len(queries)  # the first copy: numpy's float32 may score a later one higher
    assert np.all(np.isin(index.search(queries, 3)[1][:, 0], [own + m * len(queries) for m in range(3)]))


def test_too_few_training_vectors_say_how_many_are_needed(data) -> None:
    vectors, _ = data
    with pytest.raises(UserError, match=r"needs at least 3,900 vectors to train .* got 3,000"):
        SearchIndex.build(vectors[:3000], kind="ivf", nlist=100, progress=False)
    with pytest.raises(UserError, match=r"'ivfpq' .* needs at least 39 vectors .* got 20"):
        SearchIndex.build(vectors[:20], kind="ivfpq", progress=False)


def test_auto_picks_flat_for_small_collections_and_ivfpq_under_a_tight_budget(data) -> None:
    assert build("auto", data).kind == "flat"
    tight = build("auto", data, max_memory=40 * N, target_recall=0.9)
    assert tight.kind == "ivfpq" and tight.manifest.requested_kind == "auto"
    assert tight.manifest.max_memory == 40 * N


def test_metadata_rows_come_back_by_id_with_extra_columns(data) -> None:
    vectors, _ = data
    table = pa.table({"path": [f"p{i}" for i in range(N)], "label": np.arange(N) % 7, "width": np.arange(N) * 2})
    index = build("flat", data, table)
    ids = [N - 1, 0, 1234]
    assert index.metadata_for(ids) == [{"id": i, "path": f"p{i}", "label": i % 7, "width": 2 * i} for i in ids]
    with pytest.raises(UserError, match="metadata has 3 rows for 4000 vectors"):
        SearchIndex.build(vectors, {"path": ["a", "b", "c"]}, kind="flat", progress=False)
    with pytest.raises(UserError, match="must not have a column named 'id'"):
        SearchIndex.build(vectors, {"id": np.arange(N)}, kind="flat", progress=False)


def test_unnormalized_inputs_are_normalized_and_recorded(data) -> None:
    vectors, queries = data
    index = SearchIndex.build(vectors * 3.0, kind="flat", progress=False)
    assert index.manifest.normalized and not index.manifest.inputs_were_normalized
    scores, ids = index.search(queries * 0.5, k=1)
    np.testing.assert_array_equal(ids[:, 0], brute_force(vectors, np.arange(N), queries, 1)[:, 0])
    assert np.all(scores <= 1.0 + 1e-5)


def test_bad_queries_are_user_errors(data) -> None:
    vectors, queries = data
    index = build("flat", data)
    with pytest.raises(UserError, match="dimension 8, the index holds 32-d"):
        index.search(np.ones((1, 8), np.float32))
    with pytest.raises(UserError, match="NaN"):
        index.search(np.full((1, 32), np.nan, np.float32))
    with pytest.raises(UserError, match="all zeros"):
        index.search(np.zeros(32, np.float32))
    with pytest.raises(UserError, match="k must be a positive integer"):
        index.search(queries, k=0)


def test_fewer_results_than_k_are_padded(data) -> None:
    vectors, _ = data
    index = SearchIndex.build(vectors[:5], kind="flat", progress=False)
    index.remove([1])
    scores, ids = index.search(vectors[:1], k=6)
    assert sorted(ids[0, :4].tolist()) == [0, 2, 3, 4] and ids[0, 0] == 0
    assert ids[0, 4:].tolist() == [-1, -1] and np.all(np.isneginf(scores[0, 4:]))


def test_a_memory_mapped_index_searches_the_same_and_refuses_writes(data, tmp_path) -> None:
    _, queries = data
    index = build("ivfpq", data)
    index.save(tmp_path / "index")
    mapped = SearchIndex.load(tmp_path / "index", mmap=True)
    np.testing.assert_array_equal(mapped.search(queries, 10)[1], index.search(queries, 10)[1])
    with pytest.raises(UserError, match="mmap=True"):
        mapped.add(queries[:1])
    with pytest.raises(UserError, match="mmap=True"):
        mapped.remove([0])


def test_evaluate_reports_recall_latency_and_size(data) -> None:
    vectors, queries = data
    flat, ivf = build("flat", data), build("ivf", data, nlist=64)
    for queries_or_none in (queries, None):
        exact = flat.evaluate(queries_or_none)
        assert exact.recall_at_k == 1.0 and exact.kind == "flat" and exact.ntotal == N
        assert exact.p50_ms <= exact.p99_ms and exact.batch_qps > 0
        assert exact.resident_bytes_per_vector == exact.disk_bytes_per_vector >= 4 * 32  # all in index.faiss
    ivf._index.nprobe = 1
    truth = brute_force(vectors, np.arange(N), queries, 10)
    assert ivf.evaluate(queries).recall_at_k == pytest.approx(overlap(ivf.search(queries, 10)[1], truth))


def test_an_index_smaller_than_k_counts_only_the_neighbours_it_has(data) -> None:
    """10 vectors leave each query 9 others: finding all 9 is recall 1.0, not 9/10."""
    vectors, _ = data
    index = SearchIndex.build(vectors[:10], kind="flat", progress=False)
    measured = index.manifest.measured  # one vector held out at build, searched among the other 9
    assert (measured.recall_at_k, measured.neighbors, measured.queries) == (1.0, 9, 1)
    for k, neighbors in ((10, 9), (9, 9), (5, 5)):
        result = index.evaluate(k=k)
        assert (result.recall_at_k, result.neighbors, result.queries) == (1.0, neighbors, 10)


def test_a_single_vector_has_no_recall_to_measure(data) -> None:
    vectors, _ = data
    result = SearchIndex.build(vectors[:1], kind="flat", progress=False).evaluate(k=10)
    assert result.recall_at_k is None and result.neighbors == 0 and result.queries == 1


@pytest.mark.slow
def test_the_index_works_beside_faiss_torch_utils() -> None:
    """pytorch-metric-learning's accuracy calculator imports faiss.contrib.torch_utils, which makes faiss
    return torch tensors from methods given no numpy array; an index in the same process must not care."""
    script = textwrap.dedent(
        """
        import numpy as np
        from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator  # patches faiss
        from retrieval.index import SearchIndex, clustered_unit_vectors

        vectors, _ = clustered_unit_vectors(300, dim=16, n_clusters=5, seed=0)
        for kind in ("flat", "hnsw", "ivf"):
            index = SearchIndex.build(vectors, kind=kind, progress=False)
            assert isinstance(index.reconstruct(7), np.ndarray)
            assert index.evaluate(k=10).recall_at_k > 0.5
        assert SearchIndex.build(vectors[:1], kind="flat", progress=False).evaluate(k=10).recall_at_k is None
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "OMP_NUM_THREADS": "1"}
    assert subprocess.run([sys.executable, "-c", script], env=env, timeout=300).returncode == 0
