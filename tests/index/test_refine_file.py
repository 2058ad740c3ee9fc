"""ivfpq's re-ranking vectors in refine.faiss: a streamed build equals the in-memory one, saved and mapped."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.index.refine_file import REFINE_FILE, without_refine
from retrieval.index.streaming import VectorStream


@pytest.fixture(scope="module")
def built(data, tmp_path_factory) -> tuple[SearchIndex, SearchIndex, Path]:
    """An in-memory ivfpq build and a spilled one of the same rows (the same training sample: the same seed)."""
    vectors, _ = data
    work = tmp_path_factory.mktemp("work")
    options = {"kind": "ivfpq", "target_recall": 0.9, "progress": False}
    in_memory = SearchIndex.build(vectors, **options)
    spilled = SearchIndex.build_streamed(
        VectorStream.of_array(vectors), chunk_rows=97, refine_directory=work, **options
    )
    return in_memory, spilled, work


def test_a_spilled_build_gives_the_in_memory_builds_ids_and_scores(built, data) -> None:
    in_memory, spilled, _ = built
    _, queries = data
    assert without_refine(spilled._index) is not None and without_refine(in_memory._index) is None
    assert spilled.manifest.search_parameters == in_memory.manifest.search_parameters
    assert spilled.manifest.measured.recall_at_k == in_memory.manifest.measured.recall_at_k
    expected_scores, expected_ids = in_memory.search(queries, 10)
    scores, ids = spilled.search(queries, 10)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=1e-6)


def test_the_refine_file_holds_the_added_vectors_in_insertion_order_and_maps_back(built, data) -> None:
    _, spilled, work = built
    vectors, _ = data
    flat = faiss.read_index(str(work / REFINE_FILE))  # an ordinary FAISS flat index file
    ids, stored = spilled.all_vectors()
    np.testing.assert_array_equal(ids, np.arange(len(vectors)))
    np.testing.assert_array_equal(stored, vectors)
    assert flat.ntotal == len(vectors)
    order = faiss.vector_to_array(spilled._index.id_map)
    np.testing.assert_array_equal(flat.reconstruct_n(0, flat.ntotal), vectors[order])


def test_saved_and_loaded_it_searches_the_same_and_is_read_only(built, data, tmp_path) -> None:
    in_memory, spilled, work = built
    _, queries = data
    spilled.save(tmp_path / "index")
    assert REFINE_FILE in spilled.manifest.files
    size = spilled.manifest.files["index.faiss"].size
    assert size < 60 * spilled.ntotal + 200_000  # codes and ids, not the 4·D bytes of float32 vectors
    for mmap in (False, True):
        loaded = SearchIndex.load(tmp_path / "index", mmap=mmap)
        for expected, got in zip(in_memory.search(queries, 10), loaded.search(queries, 10), strict=True):
            np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(loaded.reconstruct(7), in_memory.reconstruct(7))
        with pytest.raises(UserError, match="read-only"):
            loaded.add(queries[:2])
        with pytest.raises(UserError, match="read-only"):
            loaded.remove([3])
    evaluated = loaded.evaluate(queries)
    assert evaluated.recall_at_k == pytest.approx(in_memory.evaluate(queries).recall_at_k)
    whole = in_memory.evaluate(queries)
    assert evaluated.disk_bytes_per_vector == pytest.approx(whole.disk_bytes_per_vector, rel=0.05)
    # The spilled index keeps its 4·D bytes of re-ranking vectors in refine.faiss, mapped: not resident.
    assert evaluated.resident_bytes_per_vector < whole.resident_bytes_per_vector - 3 * 32
