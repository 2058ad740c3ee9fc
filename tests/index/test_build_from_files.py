"""Index builds from embedding files: streamed equals in-memory, on-disk lists, no half index.

The command's printed lines and refusals are tested in tests/cli/test_index_from_files_cli.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from retrieval.embedding_files.file_formats import write_embeddings
from retrieval.errors import UserError
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.export.index_encoder import encoder_for_index
from retrieval.export.index_query import QueryRequest, query_index
from retrieval.index import SearchIndex
from retrieval.index.from_embeddings import check_column_types, open_embedding_files
from retrieval.index.streaming import VectorStream, exact_neighbors_streamed
from retrieval.inference.embed_run import EmbedRequest, check_embed_request, run_embed
from retrieval.runtime.files import file_sha256
from tests.index.index_oracle import brute_force, overlap


@pytest.mark.parametrize("kind", ["flat", "ivf", "ivfpq"])
def test_a_streamed_build_in_tiny_chunks_equals_the_build_from_the_whole_array(kind: str, data) -> None:
    vectors, queries = data
    whole = SearchIndex.build(vectors, kind=kind, target_recall=0.9, progress=False)
    streamed = SearchIndex.build_streamed(
        VectorStream.of_array(vectors), kind=kind, target_recall=0.9, progress=False, chunk_rows=97
    )
    np.testing.assert_array_equal(streamed.ids, whole.ids)
    assert streamed.manifest.search_parameters == whole.manifest.search_parameters
    assert streamed.manifest.measured.recall_at_k == whole.manifest.measured.recall_at_k
    for expected, got in zip(whole.search(queries, 10), streamed.search(queries, 10), strict=True):
        np.testing.assert_array_equal(got, expected)


def test_streamed_exact_neighbours_equal_the_brute_force_oracle(data) -> None:
    vectors, queries = data
    ids = np.arange(len(vectors)) * 3  # ids other than positions
    chunks = ((ids[s : s + 333], vectors[s : s + 333]) for s in range(0, len(vectors), 333))
    _, found = exact_neighbors_streamed(chunks, queries, 10)
    assert overlap(found, brute_force(vectors, ids, queries, 10)) == 1.0


def test_every_file_format_streams_the_same_rows_and_metadata(data, tmp_path) -> None:
    vectors, _ = data
    paths = [f"/img/{i}.png" for i in range(300)]
    labels = [str(i % 7) for i in range(300)]
    for suffix in ("parquet", "npy", "npz"):
        write_embeddings(tmp_path / f"e.{suffix}", vectors[:300], paths, labels, {"split": ["test"] * 300})
    np.save(tmp_path / "plain.npy", vectors[300:400])
    files = open_embedding_files([tmp_path / name for name in ("e.parquet", "e.npy", "e.npz", "plain.npy")])
    assert (files.rows, files.dim) == (1000, 32)
    np.testing.assert_array_equal(
        np.concatenate(list(files.stream.read(64))), np.concatenate([vectors[:300]] * 3 + [vectors[300:400]])
    )
    metadata = files.metadata().to_pylist()
    assert metadata[301] == {"path": "/img/1.png", "label": 1, "split": "test"}
    assert metadata[950] == {"path": None, "label": None, "split": None}  # a plain array has ids only


@pytest.mark.slow
def test_a_build_killed_while_saving_leaves_the_previous_index_intact(data, tmp_path) -> None:
    vectors, _ = data
    write_embeddings(tmp_path / "a.npy", vectors[:1000], ["x"] * 1000, ["0"] * 1000)
    write_embeddings(tmp_path / "b.npy", vectors, ["y"] * len(vectors), ["1"] * len(vectors))
    out = tmp_path / "index"
    build_index(IndexBuildRequest(out, embeddings=(tmp_path / "a.npy",), kind="flat"))
    killer = (
        "import os, signal, sys\n"
        "from retrieval.index import SearchIndex\n"
        "from retrieval.index.from_embeddings import open_embedding_files\n"
        "def write_half(self, path):\n"
        "    path.write_bytes(b'half an index')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "SearchIndex._write_faiss = write_half\n"
        "files = open_embedding_files([sys.argv[1]])\n"
        "SearchIndex.build_streamed(files.stream, files.metadata(), kind='flat', progress=False).save(sys.argv[2])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    killed = subprocess.run([sys.executable, "-c", killer, str(tmp_path / "b.npy"), str(out)], env=env)
    assert killed.returncode == -signal.SIGKILL
    index = SearchIndex.load(out)  # verified against its manifest: complete, and the previous one
    assert index.ntotal == 1000 and index.metadata_for([0])[0]["path"] == "x"
    assert any(path.name.endswith(".tmp") for path in tmp_path.iterdir())  # what the killed save left
    # the next build replaces the index and clears the killed one's leftovers
    build_index(IndexBuildRequest(out, embeddings=(tmp_path / "b.npy",), kind="flat"))
    assert SearchIndex.load(out).ntotal == len(vectors)
    assert not any(path.name.endswith(".tmp") for path in tmp_path.iterdir())


def test_shards_merged_into_on_disk_lists_search_like_one_in_memory_build(data, tmp_path) -> None:
    vectors, queries = data
    whole = SearchIndex.build(vectors, kind="ivf", target_recall=0.9, progress=False)
    (tmp_path / "work").mkdir()
    merged = SearchIndex.build_streamed(
        VectorStream.of_array(vectors),
        kind="ivf",
        target_recall=0.9,
        progress=False,
        chunk_rows=250,
        max_memory=300_000,  # shards of 300,000 / 2 / 136 bytes = 1,102 rows: 4 shards, then the held-out rows
        on_disk=tmp_path / "work",
    )
    assert merged.manifest.search_parameters == whole.manifest.search_parameters
    merged.save(tmp_path / "index")
    (tmp_path / "index").rename(tmp_path / "moved")
    loaded = SearchIndex.load(tmp_path / "moved")
    assert sorted(path.name for path in (tmp_path / "moved").iterdir()) == [
        "index.faiss",
        "lists.ivfdata",
        "manifest.json",
        "metadata.arrow",
    ]
    np.testing.assert_array_equal(loaded.ids, whole.ids)
    for expected, got in zip(whole.search(queries, 10), loaded.search(queries, 10), strict=True):
        np.testing.assert_array_equal(got, expected)
    with pytest.raises(UserError, match="on-disk lists"):
        loaded.add(queries)


def test_an_index_from_embedding_files_asks_for_the_checkpoint_to_embed_images(tmp_path) -> None:
    with pytest.raises(UserError, match="pass the checkpoint that made the embeddings with --checkpoint"):
        encoder_for_index({"checkpoint_sha256": "ab" * 32})
    with pytest.raises(UserError, match="is not the one this index was built with"):
        (tmp_path / "other.pt").write_bytes(b"another model")
        encoder_for_index({"checkpoint_sha256": "ab" * 32}, tmp_path / "other.pt")


@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["parquet", "npz"])
def test_an_index_of_one_embed_file_is_searched_by_image_with_its_checkpoint(
    tmp_path, tiny_checkpoint, csv_dataset_factory, suffix
) -> None:
    """Through the library calls `embed`, `index build` and `index query --checkpoint` run."""
    csv_path = csv_dataset_factory(tmp_path / "data", train_classes=2, test_classes=2, per_class=3)
    embeddings, index = tmp_path / f"emb.{suffix}", tmp_path / "index"
    embed = EmbedRequest(tiny_checkpoint, str(embeddings), csv=csv_path, device="cpu")
    run_embed(embed, check_embed_request(embed))
    assert open_embedding_files([embeddings]).checkpoint_sha256 == file_sha256(tiny_checkpoint)
    build_index(IndexBuildRequest(index, embeddings=(embeddings,), kind="flat"))
    image = next((csv_path.parent / "images").iterdir())
    (answer,) = query_index(QueryRequest(index, images=(image,), checkpoint=tiny_checkpoint)).answers
    assert answer.results[0].path == str(image.resolve())


def test_column_types_name_the_column_and_both_sources() -> None:
    schemas = [("s0", pa.schema([("x", pa.int64()), ("y", pa.string())])), ("s1", pa.schema([("y", pa.int64())]))]
    with pytest.raises(UserError, match=r"^column 'y' is string in s0 but int64 in s1; rebuild$"):
        check_column_types(schemas, "rebuild")
    joined = check_column_types([("s0", pa.schema([("x", pa.int64())])), ("s1", pa.schema([("x", pa.float64())]))], "")
    assert joined.field("x").type == pa.float64()
