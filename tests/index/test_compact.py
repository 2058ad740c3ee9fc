"""`compact` drops the removed vectors hnsw and ivfpq only hide: same survivors, smaller file, atomic for readers.

What the command prints: tests/cli/test_index_compact_cli.py.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from retrieval.index import SearchIndex
from retrieval.index.filter_language import parse_where
from retrieval.index.storage import INDEX_FILE, writing
from tests.index.index_oracle import N, brute_force, overlap

TARGET = 0.9
REMOVED = np.arange(0, N, 3)  # a third of the vectors


def removed_and_saved(kind: str, data, directory: Path) -> SearchIndex:
    vectors, queries = data
    index = SearchIndex.build(
        vectors,
        {"label": (np.arange(N) % 7).tolist()},
        kind=kind,
        tuning_queries=queries,
        target_recall=TARGET,
        progress=False,
    )
    index.remove(REMOVED)
    index.save(directory)
    return index


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq"])
def test_compact_keeps_the_survivors_results_and_shrinks_the_index(kind: str, data, tmp_path: Path) -> None:
    vectors, queries = data
    index = removed_and_saved(kind, data, tmp_path / "gallery")
    survivors = np.setdiff1d(np.arange(N), REMOVED)
    before_ids = index.search(queries, 10)[1]
    before_vectors = np.stack([index.reconstruct(i) for i in survivors[:50]])
    size_before = (tmp_path / "gallery" / INDEX_FILE).stat().st_size

    with SearchIndex.edit(tmp_path / "gallery") as editing:
        assert editing.compact() == len(REMOVED)
    compacted = SearchIndex.load(tmp_path / "gallery")

    scores, ids = compacted.search(queries, 10)
    assert not np.isin(ids, REMOVED).any()
    assert overlap(ids, before_ids) >= 0.95
    assert overlap(ids, brute_force(vectors[survivors], survivors, queries, 10)) >= TARGET
    np.testing.assert_array_equal(np.stack([compacted.reconstruct(i) for i in survivors[:50]]), before_vectors)
    np.testing.assert_array_equal(compacted.search(vectors[survivors[:200]], 1)[1][:, 0], survivors[:200])
    np.testing.assert_array_equal(compacted.ids, survivors)
    assert compacted.metadata_for([survivors[5]]) == index.metadata_for([survivors[5]])
    manifest = compacted.manifest.as_dict()
    assert manifest["removed_ids"] == [] and manifest["stored"] == manifest["count"] == len(survivors)
    assert manifest["search_parameters"] == index.manifest.search_parameters
    assert (tmp_path / "gallery" / INDEX_FILE).stat().st_size < 0.8 * size_before
    filtered = compacted.search(queries, 10, filter=parse_where("label = 3"))[1]
    assert {row["label"] for row in compacted.metadata_for(filtered[filtered >= 0])} == {3}
    assert compacted.add(vectors[:2]).tolist() == [N, N + 1]  # ids are never reused


def test_kinds_that_drop_removed_vectors_have_nothing_to_compact(data) -> None:
    vectors, _ = data
    for kind in ("flat", "ivf"):
        index = SearchIndex.build(vectors, kind=kind, progress=False)
        index.remove(REMOVED)
        assert index.compact() == 0 and index.ntotal == N - len(REMOVED)


def test_a_concurrent_reader_never_sees_a_half_compacted_index(data, tmp_path: Path) -> None:
    vectors, queries = data
    removed_and_saved("hnsw", data, tmp_path / "gallery")
    failures: list[BaseException] = []
    counts: set[int] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                reader = SearchIndex.load(tmp_path / "gallery")
                counts.add(int(reader.manifest.stored))
                assert not np.isin(reader.search(queries[:20], 10)[1], REMOVED).any()
            except BaseException as exc:  # noqa: BLE001 - any failure of the reader fails the test
                failures.append(exc)
                return

    reader = threading.Thread(target=read)
    reader.start()
    try:
        _compact(tmp_path / "gallery")
        _compact(tmp_path / "gallery")  # nothing left: a no-op
    finally:
        done.set()
        reader.join()
    assert not failures, failures[0]
    assert counts <= {N, N - len(REMOVED)}
    assert SearchIndex.load(tmp_path / "gallery").manifest.stored == N - len(REMOVED)


def _compact(directory: Path) -> int:
    """What `retrieval index compact --index DIRECTORY` runs: the index edited under its writer lock, compacted."""
    with writing(directory), SearchIndex.edit(directory) as index:
        return index.compact()
