"""One writer at a time: concurrent edits in separate processes all take effect; a blocked writer says who."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from retrieval.errors import UserError
from retrieval.index import SearchIndex, clustered_unit_vectors
from retrieval.index.locking import lock_path, writer_lock
from tests.index.index_faults import lock_released_after

REPO = Path(__file__).resolve().parents[2]
START, ROUNDS, WORKERS = 40, 12, 4  # half the workers add, half remove: 48 edits racing

_WORKER = textwrap.dedent(
    """
    import sys
    from retrieval.index import SearchIndex, clustered_unit_vectors

    directory, worker, start, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    vectors, _ = clustered_unit_vectors(rounds, 8, n_clusters=2, seed=worker)
    for round_ in range(rounds):
        with SearchIndex.edit(directory, lock_timeout=120) as index:
            if worker % 2:  # remover: the original ids of its own stripe
                index.remove([worker // 2 * rounds + round_])
            else:
                index.add(vectors[round_ : round_ + 1], {"path": [f"w{worker}-r{round_}"]})
    """
)


@pytest.fixture
def small_index(tmp_path: Path) -> Path:
    vectors, _ = clustered_unit_vectors(START, 8, n_clusters=4, seed=0)
    SearchIndex.build(vectors, {"path": [f"start-{i}" for i in range(START)]}, kind="flat", progress=False).save(
        tmp_path / "index"
    )
    return tmp_path / "index"


@pytest.mark.slow
def test_concurrent_adds_and_removes_in_separate_processes_lose_nothing(small_index: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    workers = [
        subprocess.Popen([sys.executable, "-c", _WORKER, str(small_index), str(w), str(START), str(ROUNDS)], env=env)
        for w in range(WORKERS)
    ]
    assert [worker.wait(timeout=300) for worker in workers] == [0] * WORKERS

    index = SearchIndex.load(small_index)
    paths = {row["path"] for row in index.metadata_for(index.ids)}
    removed = {f"start-{i}" for i in range(WORKERS // 2 * ROUNDS)}
    added = {f"w{w}-r{r}" for w in range(0, WORKERS, 2) for r in range(ROUNDS)}
    assert paths == ({f"start-{i}" for i in range(START)} - removed) | added
    assert index.ntotal == START and index.manifest.next_id == START + len(added)


def test_a_blocked_writer_gives_up_after_its_timeout_naming_the_holder(small_index: Path) -> None:
    with writer_lock(small_index):
        started = time.monotonic()
        with pytest.raises(UserError, match=rf"being written by process {os.getpid()}: gave up after waiting 0.3 s"):
            with SearchIndex.edit(small_index, lock_timeout=0.3):
                pass
        assert time.monotonic() - started >= 0.3


def test_a_blocked_writer_proceeds_once_the_holder_is_done(small_index: Path) -> None:
    with lock_released_after(small_index, 0.3), SearchIndex.edit(small_index, lock_timeout=30) as index:
        index.remove([0])
    assert SearchIndex.load(small_index).ntotal == START - 1


def test_the_lock_lives_beside_the_directory_and_survives_its_swap(small_index: Path) -> None:
    assert lock_path(small_index) == small_index.parent / ".index.lock"
    with writer_lock(small_index):
        index = SearchIndex.load(small_index)
        index.remove([1])
        index.save(small_index)  # swaps the directory for a new one
        with pytest.raises(UserError, match="gave up"), writer_lock(small_index, timeout=0):
            pass
    with writer_lock(small_index, timeout=0):
        assert lock_path(small_index).read_text() == str(os.getpid())
    assert lock_path(small_index).read_text() == ""
