"""`retrieval index build --embeddings` and `index eval` of what it built: the printed lines and the refusals.

What the builds store and find is tested through the library in tests/index/test_build_from_files.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from retrieval.cli.main import main
from retrieval.embedding_files.file_formats import write_embeddings
from retrieval.errors import UserError
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex, clustered_unit_vectors
from retrieval.index.from_embeddings import open_embedding_files
from retrieval.index.shards import train_index
from retrieval.runtime.files import file_sha256
from tests.index.embedding_parts import write_parts as _write_parts
from tests.index.index_oracle import brute_force, overlap

pytestmark = pytest.mark.usefixtures("one_faiss_thread")


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
    build_index(IndexBuildRequest(index, embeddings=(gallery,), on_disk=True))  # what `index build --on-disk` runs
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
    train_index(open_embedding_files([tmp_path / "a.parquet"]), tmp_path / "t", progress=False)  # `index train`
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


# The vectors of tests/index/test_metadata_types.py, whose column types the refusal below is one of.
N = 6
VECTORS = clustered_unit_vectors(N, 8, n_clusters=2, seed=0)[0]


def test_a_binary_embedding_column_is_refused_at_index_build(tmp_path: Path, capsys) -> None:
    """Defect 9: `index build --embeddings` took a binary column without a word, and `index export` then failed
    halfway with a bare `'utf-8' codec can't decode`; now the build refuses the file in one line."""
    path = tmp_path / "e.parquet"
    blobs = pa.array([b"\xff\xfe"] * N, pa.binary())
    write_embeddings(path, VECTORS, [f"/x/{i}.png" for i in range(N)], pa.array(range(N)), {"blob": blobs})
    with pytest.raises(UserError, match=rf"metadata column 'blob' of {path} has type binary"):
        open_embedding_files([path])
    capsys.readouterr()
    assert main(["index", "build", "--embeddings", str(path), "--out", str(tmp_path / "index")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: metadata column 'blob' of {path} has type binary, which an index does not store; "
        "use bool, integers, floats or strings (or a dictionary of them): convert the column, e.g. to a string, "
        "or leave it out"
    ]
    assert not (tmp_path / "index").exists()
