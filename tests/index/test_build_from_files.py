"""Index builds from embedding files: streamed equals in-memory, the CLI from files and parts, no half index."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from retrieval.cli.main import main
from retrieval.embedding_files.file_formats import write_embeddings
from retrieval.errors import UserError
from retrieval.export.index_encoder import encoder_for_index
from retrieval.index import SearchIndex
from retrieval.index.from_embeddings import check_column_types, open_embedding_files
from retrieval.index.streaming import VectorStream, exact_neighbors_streamed
from retrieval.runtime.files import file_sha256
from tests.index.index_oracle import brute_force, overlap

PART_ROWS = 1000


def _write_parts(directory: Path, vectors: np.ndarray, labels: list[str], finished: bool = True) -> None:
    """The layout `retrieval embed --out DIR/` writes: parquet parts, a `.json` each, `_SUCCESS` last."""
    directory.mkdir(parents=True)
    names = []
    for part, start in enumerate(range(0, len(vectors), PART_ROWS)):
        stop = min(start + PART_ROWS, len(vectors))
        path = directory / f"part-{part:05d}.parquet"
        write_embeddings(path, vectors[start:stop], [f"/img/{i}.png" for i in range(start, stop)], labels[start:stop])
        record = {"part": part, "first_row": start, "rows": stop - start, "sha256": file_sha256(path), "dim": 32}
        path.with_suffix(".json").write_text(json.dumps(record))
        names.append(path.name)
    if finished:
        success = {"rows": len(vectors), "dim": 32, "parts": names, "checkpoint_sha256": "ab" * 32}
        (directory / "_SUCCESS").write_text(json.dumps(success))


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


def test_the_cli_builds_from_a_parquet_file_without_a_model(data, tmp_path, capsys) -> None:
    vectors, queries = data
    labels = [f"class{i % 40}" for i in range(len(vectors))]
    write_embeddings(tmp_path / "gallery.parquet", vectors, [f"/img/{i}.png" for i in range(len(vectors))], labels)
    out = tmp_path / "index"
    assert (
        main(["index", "build", "--embeddings", str(tmp_path / "gallery.parquet"), "--out", str(out), "--type", "ivf"])
        == 0
    )
    assert "vectors: 4000 from 1 embedding input(s)" in capsys.readouterr().out
    index = SearchIndex.load(out)
    assert index.manifest.sources[0].rows == 4000 and index.manifest.model.record() == {}
    assert index.metadata_for([17])[0] == {"id": 17, "path": "/img/17.png", "label": "class17"}
    _, found = index.search(queries, 10)
    assert overlap(found, brute_force(vectors, np.arange(len(vectors)), queries, 10)) >= 0.9


def test_the_cli_builds_from_a_parts_directory_in_part_order(data, tmp_path, capsys) -> None:
    vectors, queries = data
    _write_parts(tmp_path / "parts", vectors, [str(i % 40) for i in range(len(vectors))])
    out = tmp_path / "index"
    assert main(["index", "build", "--embeddings", str(tmp_path / "parts"), "--out", str(out), "--type", "flat"]) == 0
    index = SearchIndex.load(out)
    assert index.manifest.model.record() == {"checkpoint_sha256": "ab" * 32}
    assert [source.model_dump(exclude_unset=True) for source in index.manifest.sources] == [
        {"path": str(tmp_path / "parts"), "rows": len(vectors)}
    ]
    _, found = index.search(queries, 10)
    np.testing.assert_array_equal(found, brute_force(vectors, np.arange(len(vectors)), queries, 10))
    assert index.metadata_for([2500])[0]["path"] == "/img/2500.png"


def test_an_unfinished_parts_directory_or_a_corrupt_part_is_refused(data, tmp_path, capsys) -> None:
    vectors, _ = data
    _write_parts(tmp_path / "running", vectors, ["0"] * len(vectors), finished=False)
    assert main(["index", "build", "--embeddings", str(tmp_path / "running"), "--out", str(tmp_path / "i")]) == 2
    assert "is incomplete: rerun the same embed command to resume it" in capsys.readouterr().err
    _write_parts(tmp_path / "done", vectors, ["0"] * len(vectors))
    with (tmp_path / "done" / "part-00002.parquet").open("r+b") as handle:
        handle.seek(100)
        handle.write(b"\0\0\0\0")
    assert main(["index", "build", "--embeddings", str(tmp_path / "done"), "--out", str(tmp_path / "i")]) == 2
    assert "does not match its .json" in capsys.readouterr().err
    assert not (tmp_path / "i").exists()


@pytest.mark.slow
def test_a_build_killed_while_saving_leaves_the_previous_index_intact(data, tmp_path) -> None:
    vectors, _ = data
    write_embeddings(tmp_path / "a.npy", vectors[:1000], ["x"] * 1000, ["0"] * 1000)
    write_embeddings(tmp_path / "b.npy", vectors, ["y"] * len(vectors), ["1"] * len(vectors))
    out = tmp_path / "index"
    argv = ["index", "build", "--embeddings", str(tmp_path / "a.npy"), "--out", str(out), "--type", "flat"]
    assert main(argv) == 0
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
    argv[3] = str(tmp_path / "b.npy")
    assert main(argv) == 0  # the next build replaces the index and clears the killed one's leftovers
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


def test_the_cli_builds_an_on_disk_index_and_removes_its_working_files(data, tmp_path, capsys) -> None:
    vectors, queries = data
    np.save(tmp_path / "gallery.npy", vectors)
    argv = ["index", "build", "--embeddings", str(tmp_path / "gallery.npy"), "--out", str(tmp_path / "index")]
    assert main([*argv, "--on-disk", "--max-memory", "300k"]) == 0
    assert "(ivf: IVF" in capsys.readouterr().out
    assert sorted(path.name for path in tmp_path.iterdir() if not path.name.endswith(".lock")) == [
        "gallery.npy",
        "index",
    ]
    _, found = SearchIndex.load(tmp_path / "index").search(queries, 10)
    assert overlap(found, brute_force(vectors, np.arange(len(vectors)), queries, 10)) >= 0.9
    assert main([*argv, "--on-disk", "--type", "hnsw"]) == 2
    assert "use --type ivf" in capsys.readouterr().err


def test_eval_of_an_on_disk_index_gives_resident_and_on_disk_bytes_and_no_faiss_prints(data, tmp_path, capfd) -> None:
    vectors, _ = data
    gallery, index = tmp_path / "gallery.npy", tmp_path / "index"
    np.save(gallery, vectors)
    assert main(["index", "build", "--embeddings", str(gallery), "--on-disk", "--out", str(index)]) == 0
    capfd.readouterr()
    assert main(["index", "eval", "--index", str(index)]) == 0
    out, err = capfd.readouterr()  # file descriptors 1 and 2: what FAISS prints from C++ too
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "index",
        "recall@10 vs exact",
        "latency p50 / p99",
        "batch throughput",
        "bytes/vector",
    ]
    resident, disk = (float(part.split()[0]) for part in lines[-1].removeprefix("bytes/vector: ").split(", "))
    assert lines[-1] == f"bytes/vector: {resident:.1f} in memory, {disk:.1f} on disk"
    assert disk >= 4 * vectors.shape[1] + 8 > 4 * resident  # the lists (vectors and ids) stay in lists.ivfdata
    assert err == ""


def test_an_index_from_embedding_files_asks_for_the_checkpoint_to_embed_images(tmp_path) -> None:
    with pytest.raises(UserError, match="pass the checkpoint that made the embeddings with --checkpoint"):
        encoder_for_index({"checkpoint_sha256": "ab" * 32})
    with pytest.raises(UserError, match="is not the one this index was built with"):
        (tmp_path / "other.pt").write_bytes(b"another model")
        encoder_for_index({"checkpoint_sha256": "ab" * 32}, tmp_path / "other.pt")


@pytest.mark.slow
@pytest.mark.parametrize("suffix", ["parquet", "npz"])
def test_an_index_of_one_embed_file_is_searched_by_image_with_its_checkpoint(
    tmp_path, tiny_checkpoint, csv_dataset_factory, suffix, capsys
) -> None:
    csv_path = csv_dataset_factory(tmp_path / "data", train_classes=2, test_classes=2, per_class=3)
    embeddings, index = tmp_path / f"emb.{suffix}", tmp_path / "index"
    embed = ["embed", "--checkpoint", str(tiny_checkpoint), "--csv", str(csv_path), "--out", str(embeddings)]
    assert main([*embed, "--device", "cpu", "--num-workers", "0"]) == 0
    assert open_embedding_files([embeddings]).checkpoint_sha256 == file_sha256(tiny_checkpoint)
    assert main(["index", "build", "--embeddings", str(embeddings), "--out", str(index), "--type", "flat"]) == 0
    image = next((csv_path.parent / "images").iterdir())
    capsys.readouterr()
    query = ["index", "query", "--index", str(index), "--image", str(image), "--json", "--num-workers", "0"]
    assert main([*query, "--checkpoint", str(tiny_checkpoint)]) == 0
    assert json.loads(capsys.readouterr().out)[0]["results"][0]["path"] == str(image.resolve())


def test_build_checkpoint_names_the_model_of_files_without_room_for_it(data, tmp_path, capsys) -> None:
    vectors, _ = data
    paths, labels = [f"/img/{i}.png" for i in range(300)], ["0"] * 300
    write_embeddings(tmp_path / "plain.npy", vectors[:300], paths, labels, checkpoint_sha256="ab" * 32)
    write_embeddings(tmp_path / "named.parquet", vectors[:300], paths, labels, checkpoint_sha256="cd" * 32)
    assert open_embedding_files([tmp_path / "plain.npy"]).checkpoint_sha256 is None  # a .npy has no room
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"the model")
    build = ["index", "build", "--type", "flat", "--checkpoint", str(checkpoint), "--embeddings"]
    assert main([*build, str(tmp_path / "plain.npy"), "--out", str(tmp_path / "index")]) == 0
    assert SearchIndex.load(tmp_path / "index").manifest.model.record() == {
        "checkpoint_sha256": file_sha256(checkpoint)
    }
    capsys.readouterr()
    assert main([*build, str(tmp_path / "named.parquet"), "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert "did not make these embeddings" in err and len(err.strip().splitlines()) == 1


def test_files_whose_columns_have_other_types_are_refused_before_any_row_is_read(data, tmp_path, capsys) -> None:
    """Labels int64 in one file and string in the other once raised ArrowTypeError (in a sharded flow: at merge)."""
    vectors, _ = data
    paths = [f"/img/{i}.png" for i in range(300)]
    write_embeddings(tmp_path / "a.parquet", vectors[:300], paths, [str(i % 7) for i in range(300)])
    write_embeddings(tmp_path / "b.npz", vectors[300:600], paths, [f"class{i % 7}" for i in range(300)])
    write_embeddings(
        tmp_path / "c.npy", vectors[600:900], paths, [str(i % 5) for i in range(300)], {"n": ["1.5"] * 300}
    )
    inputs = [str(tmp_path / name) for name in ("a.parquet", "b.npz")]
    expected = f"column 'label' is int64 in {inputs[0]} but string in {inputs[1]}; embed every file with the same"
    assert main(["index", "train", "--embeddings", str(tmp_path / "a.parquet"), "--out", str(tmp_path / "t")]) == 0
    capsys.readouterr()
    for extra in ([], ["--trained", str(tmp_path / "t"), "--shard", "1/2"]):
        assert main(["index", "build", "--embeddings", *inputs, "--out", str(tmp_path / "index"), *extra]) == 2
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err
    assert main(["index", "train", "--embeddings", *inputs, "--out", str(tmp_path / "t2")]) == 2
    assert expected in capsys.readouterr().err
    # int64 joins float64 and a column one file lacks is null there: those still build
    files = open_embedding_files([tmp_path / "a.parquet", tmp_path / "c.npy"])
    assert files.metadata().schema.field("label").type == pa.int64()


def test_column_types_name_the_column_and_both_sources() -> None:
    schemas = [("s0", pa.schema([("x", pa.int64()), ("y", pa.string())])), ("s1", pa.schema([("y", pa.int64())]))]
    with pytest.raises(UserError, match=r"^column 'y' is string in s0 but int64 in s1; rebuild$"):
        check_column_types(schemas, "rebuild")
    joined = check_column_types([("s0", pa.schema([("x", pa.int64())])), ("s1", pa.schema([("x", pa.float64())]))], "")
    assert joined.field("x").type == pa.float64()
