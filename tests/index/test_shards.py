"""Shards built from one trained index and merged: the same ids and results as one build, no half index.

The commands' refusals and printed lines are tested in tests/cli/test_index_shards_cli.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex
from retrieval.index.build import IndexBuildOptions
from retrieval.index.from_files import built_from_files
from retrieval.index.shards import merge_into, read_trained
from tests.index.shard_split import make_split


@pytest.fixture(scope="module")
def split(data, tmp_path_factory) -> dict[str, Path]:
    """A parts directory and a plain .npy of the rows after it, a trained index, three shards and their merge."""
    vectors, _ = data
    return make_split(vectors, tmp_path_factory.mktemp("split"))


def test_merged_shards_search_like_one_build_with_the_trained_index(split, data) -> None:
    vectors, queries = data
    merged = SearchIndex.load(split["root"] / "merged")
    reference = faiss.clone_index(read_trained(split["trained"]).index)  # FAISS itself, all rows in one process
    reference.add_with_ids(vectors, np.arange(len(vectors)))
    reference.nprobe = merged.manifest.search_parameters["nprobe"]
    expected_scores, expected_ids = reference.search(queries, 10)
    scores, ids = merged.search(queries, 10)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(merged.ids, np.arange(len(vectors)))
    assert merged.metadata_for([0, 2999, 3000]) == [
        {"id": 0, "path": "/img/0.png", "label": 0},
        {"id": 2999, "path": "/img/2999.png", "label": 2800},
        {"id": 3000, "path": None, "label": None},  # the .npy holds vectors only
    ]
    assert sorted(merged.manifest.files) == ["index.faiss", "lists.ivfdata", "metadata.arrow"]


def test_the_merge_equals_a_one_process_build_from_the_same_trained_index(split, data, tmp_path) -> None:
    _, queries = data
    inputs = (split["root"] / "parts", split["root"] / "tail.npy")
    build_index(IndexBuildRequest(tmp_path / "one", embeddings=inputs, trained=split["trained"]))
    whole, merged = SearchIndex.load(tmp_path / "one"), SearchIndex.load(split["root"] / "merged")
    for expected, got in zip(whole.search(queries, 10), merged.search(queries, 10), strict=True):
        np.testing.assert_array_equal(got, expected)
    assert whole.metadata_for(range(0, 4000, 250)) == merged.metadata_for(range(0, 4000, 250))


def test_shards_take_contiguous_runs_of_whole_parts(split) -> None:
    ranges = []
    for k in range(3):
        manifest = SearchIndex.load(split[f"shard{k}"]).manifest
        ranges.append((manifest.first_id or 0, manifest.next_id))
    assert ranges == [(0, 1400), (1400, 2800), (2800, 4000)]  # parts of 700 rows, then the .npy's 1,000


@pytest.mark.slow
def test_a_merge_killed_while_saving_leaves_no_index(split, tmp_path) -> None:
    out = tmp_path / "merged"
    killer = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from retrieval.index import SearchIndex\n"
        "from retrieval.index.shards import merge_into\n"
        "def write_half(self, path):\n"
        "    path.write_bytes(b'half an index')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "SearchIndex._write_faiss = write_half\n"
        "merge_into([Path(shard) for shard in sys.argv[1:-1]], Path(sys.argv[-1]))\n"  # what `index merge` runs
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    shards = [str(split[f"shard{k}"]) for k in range(3)]
    killed = subprocess.run([sys.executable, "-c", killer, *shards, str(out)], env=env)
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists()  # the killed merge's files are in a working copy beside it, never at --out
    merge_into([Path(shard) for shard in shards], out)  # and the next one clears them
    assert SearchIndex.load(out).ntotal == 4000
    assert not any(path.name.endswith(".tmp") for path in tmp_path.iterdir())


def test_shards_record_their_number_count_and_every_input(split) -> None:
    record = SearchIndex.load(split["shard1"]).manifest.shard
    assert record is not None and (record.number, record.count) == (1, 3)
    assert [(Path(item.path).name, item.rows) for item in record.inputs] == [
        ("parts", 3000),
        ("tail.npy", 1000),
    ]
    assert all(len(item.fingerprint) == 64 for item in record.inputs)


def test_a_shard_built_from_python_is_the_command_s_shard(split, tmp_path) -> None:
    """`built_from_files`, the library under `index build --embeddings --trained --shard`, from Python."""
    inputs = [split["root"] / "parts", split["root"] / "tail.npy"]
    options = IndexBuildOptions(progress=False)
    with built_from_files(inputs, tmp_path / "out", options, trained=split["trained"], shard=(2, 3)) as built:
        made = SearchIndex.load(split["shard2"])
        assert built.shard and built.first_id == int(made.ids[0]) and built.files == 2
        np.testing.assert_array_equal(built.index.ids, made.ids)
        assert built.index.manifest.shard == made.manifest.shard
    with pytest.raises(UserError, match="--shard K/M needs --trained TRAINED"):
        with built_from_files(inputs, tmp_path / "out", options, shard=(0, 2)):
            pass
