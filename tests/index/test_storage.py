"""Saved indexes: every damaged or mismatched file is refused before FAISS parses it; saves are atomic."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import faiss
import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.index import SearchIndex
from retrieval.index.metadata import Metadata
from retrieval.index.storage import FORMAT_VERSION, INDEX_FILE, MANIFEST_FILE, METADATA_FILE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def saved(data, tmp_path) -> Path:
    vectors, _ = data
    index = SearchIndex.build(vectors[:500], {"path": [f"{i}.png" for i in range(500)]}, kind="flat", progress=False)
    index.save(tmp_path / "index")
    return tmp_path / "index"


@pytest.fixture
def no_faiss_read(monkeypatch):
    """Make any call to `faiss.read_index` fail the test: damaged files must be refused before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("faiss.read_index was called on an unverified file")

    monkeypatch.setattr(faiss, "read_index", refuse)


def edit_manifest(directory: Path, **changes) -> None:
    path = directory / MANIFEST_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_the_saved_directory_has_the_three_files_and_a_full_manifest(saved: Path) -> None:
    assert sorted(p.name for p in saved.iterdir()) == sorted([INDEX_FILE, METADATA_FILE, MANIFEST_FILE])
    manifest = json.loads((saved / MANIFEST_FILE).read_text())
    for key in ("version", "dimension", "metric", "normalized", "factory", "search_parameters", "count", "measured"):
        assert key in manifest
    assert manifest["faiss_version"] == faiss.__version__ and manifest["count"] == 500
    for name in (INDEX_FILE, METADATA_FILE):
        assert manifest["files"][name]["size"] == (saved / name).stat().st_size
        assert len(manifest["files"][name]["sha256"]) == 64


@pytest.mark.usefixtures("no_faiss_read")
@pytest.mark.parametrize("name", [INDEX_FILE, METADATA_FILE])
def test_a_truncated_file_is_named(saved: Path, name: str) -> None:
    path = saved / name
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match=rf"{name} is truncated: {len(data) // 2:,} bytes, the manifest says"):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
def test_a_flipped_byte_is_a_checksum_mismatch(saved: Path) -> None:
    path = saved / INDEX_FILE
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match=rf"{INDEX_FILE} is corrupt: its sha256 does not match the manifest"):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
def test_a_grown_file_is_refused(saved: Path) -> None:
    with (saved / INDEX_FILE).open("ab") as handle:
        handle.write(b"\0")
    with pytest.raises(UserError, match="it was modified"):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
@pytest.mark.parametrize("name", [INDEX_FILE, METADATA_FILE, MANIFEST_FILE])
def test_a_missing_file_is_named(saved: Path, name: str) -> None:
    (saved / name).unlink()
    with pytest.raises(UserError, match=rf"{name} is missing"):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
def test_a_newer_format_version_asks_for_an_upgrade(saved: Path) -> None:
    edit_manifest(saved, version=FORMAT_VERSION + 1, toolkit_version="9.9.9")
    with pytest.raises(
        UserError, match=rf"format version {FORMAT_VERSION + 1}.*upgrade retrieval \(written by 9.9.9\)"
    ):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
@pytest.mark.parametrize(
    ("content", "message"),
    [("{not json", "not JSON"), ('{"format": "other"}', "not a retrieval index manifest"), ("[]", "not a retrieval")],
)
def test_a_damaged_manifest_is_refused(saved: Path, content: str, message: str) -> None:
    (saved / MANIFEST_FILE).write_text(content)
    with pytest.raises(UserError, match=message):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
def test_a_manifest_cannot_point_outside_the_directory(saved: Path) -> None:
    manifest = json.loads((saved / MANIFEST_FILE).read_text())
    manifest["files"]["../secret"] = {"size": 1, "sha256": "0" * 64}
    (saved / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="outside the index directory"):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
def test_a_model_of_another_dimension_is_refused(saved: Path) -> None:
    with pytest.raises(UserError, match="holds 32-d vectors but the model makes 64-d embeddings"):
        SearchIndex.load(saved, dim=64)


def test_a_manifest_that_disagrees_with_the_files_is_a_mismatch(saved: Path) -> None:
    edit_manifest(saved, dimension=64)
    with pytest.raises(UserError, match="holds 32-d vectors, the manifest says 64: wrong dimension"):
        SearchIndex.load(saved)
    edit_manifest(saved, dimension=32, count=499, stored=499)
    with pytest.raises(UserError, match="holds 500 vectors, the manifest says 499: count mismatch"):
        SearchIndex.load(saved)
    edit_manifest(saved, stored=500)
    with pytest.raises(UserError, match="has 500 rows, the manifest says 499 vectors: count mismatch"):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
def test_a_missing_directory_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="index directory not found.*retrieval index build"):
        SearchIndex.load(tmp_path / "nowhere")


def test_a_save_that_fails_midway_leaves_the_previous_index(saved: Path, data, monkeypatch) -> None:
    vectors, queries = data
    before = SearchIndex.load(saved).search(queries, 5)
    replacement = SearchIndex.build(vectors[500:900], kind="flat", progress=False)
    original_write = Metadata.write

    def fail_midway(self, path: Path) -> None:
        original_write(self, path)
        with path.open("r+b") as handle:
            handle.truncate(path.stat().st_size // 2)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Metadata, "write", fail_midway)
    with pytest.raises(OSError, match="No space left"):
        replacement.save(saved)
    reloaded = SearchIndex.load(saved)
    assert reloaded.ntotal == 500
    np.testing.assert_array_equal(reloaded.search(queries, 5)[1], before[1])
    assert sorted(p.name for p in saved.parent.iterdir()) == ["index"]  # no staging directory left behind

    monkeypatch.setattr(Metadata, "write", original_write)
    replacement.save(saved)
    assert SearchIndex.load(saved).ntotal == 400
    assert sorted(p.name for p in saved.parent.iterdir()) == ["index"]


def test_a_process_killed_while_saving_leaves_the_previous_index(saved: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os
        import numpy as np
        from retrieval.index import SearchIndex
        from retrieval.index.metadata import Metadata

        def die_midway(self, path):
            path.write_bytes(b"half a file")
            os._exit(9)  # no cleanup, no finally: like SIGKILL

        Metadata.write = die_midway
        vectors = np.random.default_rng(0).standard_normal((50, 32)).astype("float32")
        SearchIndex.build(vectors, kind="flat", progress=False).save({str(saved)!r})
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    assert subprocess.run([sys.executable, "-c", script], env=env, timeout=120).returncode == 9
    assert SearchIndex.load(saved).ntotal == 500
