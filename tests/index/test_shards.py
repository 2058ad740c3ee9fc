"""Shards built from one trained index and merged: the same ids and results as one build, refusals, no half index."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.embedding_files.file_formats import write_embeddings
from retrieval.errors import UserError
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex
from retrieval.index.build import IndexBuildOptions
from retrieval.index.from_embeddings import open_embedding_files
from retrieval.index.from_files import built_from_files
from retrieval.index.shards import merge_into, read_trained, train_index
from retrieval.runtime.files import file_sha256

PART_ROWS = 700
NLIST = 16


def _parts(directory: Path, vectors: np.ndarray) -> Path:
    """The layout `retrieval embed --out DIR/` writes: parquet parts, a `.json` each, `_SUCCESS` last."""
    directory.mkdir()
    names = []
    for part, start in enumerate(range(0, len(vectors), PART_ROWS)):
        stop = min(start + PART_ROWS, len(vectors))
        path = directory / f"part-{part:05d}.parquet"
        write_embeddings(
            path, vectors[start:stop], [f"/img/{i}.png" for i in range(start, stop)], [str(start)] * (stop - start)
        )
        record = {"part": part, "first_row": start, "rows": stop - start, "sha256": file_sha256(path), "dim": 32}
        path.with_suffix(".json").write_text(json.dumps(record))
        names.append(path.name)
    success = {"rows": len(vectors), "dim": 32, "parts": names, "checkpoint_sha256": "ab" * 32}
    (directory / "_SUCCESS").write_text(json.dumps(success))
    return directory


@pytest.fixture(scope="module")
def split(data, tmp_path_factory) -> dict[str, Path]:
    """A parts directory and a plain .npy of the rows after it, a trained index, three shards and their merge."""
    vectors, _ = data
    root = tmp_path_factory.mktemp("split")
    np.save(root / "tail.npy", vectors[3000:])
    inputs = (_parts(root / "parts", vectors[:3000]), root / "tail.npy")
    # What `index train`, `index build --trained --shard K/3` and `index merge` run (their printing: below).
    train_index(open_embedding_files(list(inputs)), root / "trained", nlist=NLIST, progress=False)
    for k in range(3):
        shard = IndexBuildRequest(root / f"shard{k}", embeddings=inputs, trained=root / "trained", shard=(k, 3))
        build_index(dataclasses.replace(shard, on_disk=k == 1))
    merge_into([root / f"shard{k}" for k in (2, 0, 1)], root / "merged")
    return {"root": root, "trained": root / "trained", **{f"shard{k}": root / f"shard{k}" for k in range(3)}}


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


def test_the_merge_refuses_overlapping_ids_another_trained_index_and_non_shards(split, data, tmp_path, capsys) -> None:
    vectors, _ = data
    np.save(tmp_path / "all.npy", vectors)
    other = ["index", "train", "--embeddings", str(tmp_path / "all.npy"), "--out", str(tmp_path / "t2"), "--nlist", "8"]
    assert main(other) == 0
    build = ["index", "build", "--embeddings", str(tmp_path / "all.npy"), "--trained", str(tmp_path / "t2")]
    assert main([*build, "--out", str(tmp_path / "foreign")]) == 0
    assert (
        main(
            [
                "index",
                "build",
                "--embeddings",
                str(tmp_path / "all.npy"),
                "--type",
                "ivf",
                "--out",
                str(tmp_path / "plain"),
            ]
        )
        == 0
    )
    capsys.readouterr()
    cases = {
        "overlapping ids": [split["shard0"], split["shard0"]],
        "another trained index": [split["shard0"], tmp_path / "foreign"],
        "is not a shard": [split["shard0"], tmp_path / "plain"],
    }
    for message, shards in cases.items():
        out = tmp_path / "merged"
        assert main(["index", "merge", *map(str, shards), "--out", str(out)]) == 2
        error = capsys.readouterr().err
        assert message in error and len(error.strip().splitlines()) == 1 and "Traceback" not in error
        assert not out.exists()
    assert main([*build, "--shard", "0/2", "--type", "ivfpq", "--out", str(tmp_path / "x")]) == 2
    assert "trained ivf index; drop --type ivfpq" in capsys.readouterr().err


@pytest.mark.slow
def test_a_merge_killed_while_saving_leaves_no_index(split, tmp_path) -> None:
    out = tmp_path / "merged"
    killer = (
        "import os, signal, sys\n"
        "from retrieval.cli.main import main\n"
        "from retrieval.index import SearchIndex\n"
        "def write_half(self, path):\n"
        "    path.write_bytes(b'half an index')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "SearchIndex._write_faiss = write_half\n"
        "main(['index', 'merge', *sys.argv[1:-1], '--out', sys.argv[-1]])\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    shards = [str(split[f"shard{k}"]) for k in range(3)]
    killed = subprocess.run([sys.executable, "-c", killer, *shards, str(out)], env=env)
    assert killed.returncode == -signal.SIGKILL
    assert not out.exists()  # the killed merge's files are in a working copy beside it, never at --out
    assert main(["index", "merge", *shards, "--out", str(out)]) == 0  # and the next one clears them
    assert SearchIndex.load(out).ntotal == 4000
    assert not any(path.name.endswith(".tmp") for path in tmp_path.iterdir())


def test_a_shard_needs_a_trained_index_and_embedding_files(split, tmp_path, capsys) -> None:
    tail = str(split["root"] / "tail.npy")
    assert main(["index", "build", "--embeddings", tail, "--shard", "0/2", "--out", str(tmp_path / "a")]) == 2
    assert "--shard K/M needs --trained TRAINED" in capsys.readouterr().err
    trained = ["--trained", str(split["trained"]), "--out", str(tmp_path / "b")]
    assert main(["index", "build", "--images", str(tmp_path), *trained]) == 2
    assert "pass --embeddings PATH" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"dimension": "32"}, "manifest.json.dimension must be int, got '32'"),
        ({"parameters": {"nlist": 0}}, "manifest.json.parameters"),
        ({"kind": "hnsw"}, "manifest.json.kind must be one of ivf"),
    ],
)
def test_a_hand_edited_trained_manifest_is_refused_naming_the_field(split, tmp_path, capsys, edit, message) -> None:
    trained = tmp_path / "trained"
    shutil.copytree(split["trained"], trained)
    manifest = json.loads((trained / "manifest.json").read_text())
    (trained / "manifest.json").write_text(json.dumps({**manifest, **edit}))
    shard = ["--trained", str(trained), "--shard", "0/3", "--out", str(tmp_path / "shard")]
    line = _one_line_error(capsys, ["index", "build", "--embeddings", str(split["root"] / "tail.npy"), *shard])
    assert message in line
    assert not (tmp_path / "shard").exists()


def _one_line_error(capsys, args: list[str]) -> str:
    """The single `error:` line `retrieval` prints for a user mistake (exit code 2)."""
    capsys.readouterr()
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_shards_of_inputs_in_another_order_or_of_other_content_are_refused(data, tmp_path, capsys) -> None:
    vectors, _ = data
    for name, rows in (("a", vectors[:1500]), ("b", vectors[1500:3000]), ("c", -vectors[1500:3000])):
        np.save(tmp_path / f"{name}.npy", rows)  # c: as many rows as b, other vectors
    a, b, c = (str(tmp_path / f"{name}.npy") for name in "abc")
    assert main(["index", "train", "--embeddings", a, b, "--out", str(tmp_path / "t"), "--nlist", "8"]) == 0

    def shard(inputs: list[str], spec: str, out: str) -> str:
        args = ["index", "build", "--embeddings", *inputs, "--trained", str(tmp_path / "t"), "--shard", spec]
        assert main([*args, "--out", str(tmp_path / out)]) == 0
        return str(tmp_path / out)

    first, swapped, other = shard([a, b], "0/2", "s0"), shard([b, a], "1/2", "s1"), shard([a, c], "1/2", "s1c")
    merged = str(tmp_path / "merged")
    error = _one_line_error(capsys, ["index", "merge", first, swapped, "--out", merged])
    assert f"its input 1 is {b} (1,500 rows), {first}'s is {a} (1,500 rows)" in error  # a's rows twice, b's never
    assert "same --embeddings list, in the same order" in error
    error = _one_line_error(capsys, ["index", "merge", first, other, "--out", merged])
    assert f"its input 2 is {c} (1,500 rows)" in error  # same rows and size, other content
    error = _one_line_error(capsys, ["index", "merge", first, shard([a, b, c], "2/3", "s2of3"), "--out", merged])
    assert "built from 3 inputs" in error
    assert not (tmp_path / "merged").exists()
    assert main(["index", "merge", first, shard([a, b], "1/2", "s1ab"), "--out", merged]) == 0
    assert SearchIndex.load(tmp_path / "merged").manifest.next_id == 3000


def test_a_merge_of_a_split_with_shards_missing_or_of_another_count_is_refused(split, tmp_path, capsys) -> None:
    out = str(tmp_path / "merged")
    error = _one_line_error(capsys, ["index", "merge", str(split["shard0"]), str(split["shard2"]), "--out", out])
    assert "shard 1/3 of the split is missing; merge all 3 shards" in error
    inputs = [str(split["root"] / "parts"), str(split["root"] / "tail.npy")]
    build = ["index", "build", "--embeddings", *inputs, "--trained", str(split["trained"])]
    assert main([*build, "--shard", "1/2", "--out", str(tmp_path / "half")]) == 0
    error = _one_line_error(capsys, ["index", "merge", str(split["shard0"]), str(tmp_path / "half"), "--out", out])
    assert "is shard 1/2" in error and "is shard 0/3" in error
    error = _one_line_error(capsys, ["index", "merge", str(split["root"] / "merged"), "--out", out])
    assert "is a merged index, not a shard" in error
    assert not (tmp_path / "merged").exists()


def test_shards_record_their_number_count_and_every_input(split) -> None:
    record = SearchIndex.load(split["shard1"]).manifest.shard
    assert record is not None and (record.number, record.count) == (1, 3)
    assert [(Path(item.path).name, item.rows) for item in record.inputs] == [
        ("parts", 3000),
        ("tail.npy", 1000),
    ]
    assert all(len(item.fingerprint) == 64 for item in record.inputs)


@pytest.mark.parametrize("spec", [["--shard", "-1/2"], ["--shard=-1/2"], ["--shard", "3/2"], ["--shard", "a/b"]])
def test_a_malformed_shard_is_one_line_naming_the_form(split, spec, tmp_path, capsys) -> None:
    tail = str(split["root"] / "tail.npy")
    args = ["index", "build", "--embeddings", tail, "--trained", str(split["trained"]), *spec]
    error = _one_line_error(capsys, [*args, "--out", str(tmp_path / "x")])
    assert "--shard takes K/M with 0 <= K < M" in error
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_the_merge_prints_only_its_own_lines(split, tmp_path) -> None:
    shards = [str(split[f"shard{k}"]) for k in range(3)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    merge = [sys.executable, "-m", "retrieval", "index", "merge", *shards, "--out", str(tmp_path / "merged")]
    done = subprocess.run(merge, env=env, capture_output=True, text=True, check=True)  # FAISS's C++ output is fd-level
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["index", "vectors"]
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"next_id": 500}, "next_id 500, count 1400 and stored 1400 do not fit a shard of ids 0.."),
        ({"count": 900, "stored": 900, "next_id": 900}, "holds 1400 vectors and 1400 metadata rows"),
    ],
)
def test_a_shard_whose_manifest_was_edited_is_refused_before_merging(split, tmp_path, capsys, edit, message) -> None:
    """A lowered next_id once merged, and filtered searches of the result raised IndexError."""
    edited = tmp_path / "shard0"
    shutil.copytree(split["shard0"], edited)
    manifest = json.loads((edited / "manifest.json").read_text())
    assert (manifest.get("first_id", 0), manifest["count"], manifest["next_id"]) == (0, 1400, 1400)
    (edited / "manifest.json").write_text(json.dumps({**manifest, **edit}))
    capsys.readouterr()
    shards = [str(edited), str(split["shard1"]), str(split["shard2"])]
    assert main(["index", "merge", *shards, "--out", str(tmp_path / "merged")]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1 and "Traceback" not in error
    assert not (tmp_path / "merged").exists()


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
