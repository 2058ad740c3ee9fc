"""`retrieval index train|build --trained --shard|merge`: the commands' one-line refusals and printed lines.

What the shards and their merge hold and find is tested through the library in tests/index/test_shards.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from retrieval.cli.main import main
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex
from retrieval.index.from_embeddings import open_embedding_files
from retrieval.index.shards import merge_into, train_index
from tests.cli.errors import one_line_error
from tests.index.shard_split import make_split

pytestmark = pytest.mark.usefixtures("one_faiss_thread")


@pytest.fixture(scope="module")
def split(data, tmp_path_factory) -> dict[str, Path]:
    """A parts directory and a plain .npy of the rows after it, a trained index, three shards and their merge."""
    vectors, _ = data
    return make_split(vectors, tmp_path_factory.mktemp("split"))


def test_the_merge_refuses_overlapping_ids_another_trained_index_and_non_shards(split, data, tmp_path, capsys) -> None:
    vectors, _ = data
    np.save(tmp_path / "all.npy", vectors)
    # What `index train --nlist 8`, `index build --trained` and `index build --type ivf` run.
    train_index(open_embedding_files([tmp_path / "all.npy"]), tmp_path / "t2", nlist=8, progress=False)
    build_index(IndexBuildRequest(tmp_path / "foreign", embeddings=(tmp_path / "all.npy",), trained=tmp_path / "t2"))
    build_index(IndexBuildRequest(tmp_path / "plain", embeddings=(tmp_path / "all.npy",), kind="ivf"))
    build = ["index", "build", "--embeddings", str(tmp_path / "all.npy"), "--trained", str(tmp_path / "t2")]
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
    line = one_line_error(capsys, ["index", "build", "--embeddings", str(split["root"] / "tail.npy"), *shard])
    assert message in line
    assert not (tmp_path / "shard").exists()


def test_shards_of_inputs_in_another_order_or_of_other_content_are_refused(data, tmp_path, capsys) -> None:
    vectors, _ = data
    for name, rows in (("a", vectors[:1500]), ("b", vectors[1500:3000]), ("c", -vectors[1500:3000])):
        np.save(tmp_path / f"{name}.npy", rows)  # c: as many rows as b, other vectors
    a, b, c = (str(tmp_path / f"{name}.npy") for name in "abc")
    train_index(open_embedding_files([Path(a), Path(b)]), tmp_path / "t", nlist=8, progress=False)  # `index train`

    def shard(inputs: list[str], spec: str, out: str) -> str:
        """What `index build --embeddings INPUTS --trained t --shard SPEC --out OUT` runs."""
        number, count = (int(part) for part in spec.split("/"))
        embeddings = tuple(map(Path, inputs))
        build_index(
            IndexBuildRequest(tmp_path / out, embeddings=embeddings, trained=tmp_path / "t", shard=(number, count))
        )
        return str(tmp_path / out)

    first, swapped, other = shard([a, b], "0/2", "s0"), shard([b, a], "1/2", "s1"), shard([a, c], "1/2", "s1c")
    merged = str(tmp_path / "merged")
    error = one_line_error(capsys, ["index", "merge", first, swapped, "--out", merged])
    assert f"its input 1 is {b} (1,500 rows), {first}'s is {a} (1,500 rows)" in error  # a's rows twice, b's never
    assert "same --embeddings list, in the same order" in error
    error = one_line_error(capsys, ["index", "merge", first, other, "--out", merged])
    assert f"its input 2 is {c} (1,500 rows)" in error  # same rows and size, other content
    error = one_line_error(capsys, ["index", "merge", first, shard([a, b, c], "2/3", "s2of3"), "--out", merged])
    assert "built from 3 inputs" in error
    assert not (tmp_path / "merged").exists()
    merge_into([Path(first), Path(shard([a, b], "1/2", "s1ab"))], Path(merged))  # what `index merge` runs
    assert SearchIndex.load(tmp_path / "merged").manifest.next_id == 3000


def test_a_merge_of_a_split_with_shards_missing_or_of_another_count_is_refused(split, tmp_path, capsys) -> None:
    out = str(tmp_path / "merged")
    error = one_line_error(capsys, ["index", "merge", str(split["shard0"]), str(split["shard2"]), "--out", out])
    assert "shard 1/3 of the split is missing; merge all 3 shards" in error
    inputs = (split["root"] / "parts", split["root"] / "tail.npy")
    build_index(IndexBuildRequest(tmp_path / "half", embeddings=inputs, trained=split["trained"], shard=(1, 2)))
    error = one_line_error(capsys, ["index", "merge", str(split["shard0"]), str(tmp_path / "half"), "--out", out])
    assert "is shard 1/2" in error and "is shard 0/3" in error
    error = one_line_error(capsys, ["index", "merge", str(split["root"] / "merged"), "--out", out])
    assert "is a merged index, not a shard" in error
    assert not (tmp_path / "merged").exists()


@pytest.mark.parametrize("spec", [["--shard", "-1/2"], ["--shard=-1/2"], ["--shard", "3/2"], ["--shard", "a/b"]])
def test_a_malformed_shard_is_one_line_naming_the_form(split, spec, tmp_path, capsys) -> None:
    tail = str(split["root"] / "tail.npy")
    args = ["index", "build", "--embeddings", tail, "--trained", str(split["trained"]), *spec]
    error = one_line_error(capsys, [*args, "--out", str(tmp_path / "x")])
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
