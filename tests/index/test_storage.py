"""Saved indexes: every damaged or mismatched file is refused before FAISS parses it; saves are atomic."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
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
from retrieval.index.storage import FORMAT_VERSION, INDEX_FILE, MANIFEST_FILE, METADATA_FILE, read_verified_manifest
from tests.index.index_faults import file_size_limit

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


def test_a_lowered_next_id_is_refused_before_an_add_could_reuse_a_stored_id(saved: Path) -> None:
    largest = int(SearchIndex.load(saved).ids.max())
    edit_manifest(saved, next_id=largest)
    with pytest.raises(UserError, match=rf"next_id {largest} is not above the largest stored id {largest}"):
        SearchIndex.load(saved)
    edit_manifest(saved, next_id=largest + 1)
    assert SearchIndex.load(saved).ids.max() == largest


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


@pytest.mark.slow
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


def hidden_entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock"))


def test_a_faiss_write_that_runs_out_of_space_is_an_oserror_and_loses_nothing(saved: Path) -> None:
    index = SearchIndex.load(saved)
    index.remove([0, 1, 2])
    with file_size_limit(16_384), pytest.raises(OSError) as failure:
        index.save(saved)
    assert failure.value.errno == errno.EFBIG
    assert SearchIndex.load(saved).ntotal == 500
    assert hidden_entries(saved.parent) == []


def test_a_save_keeps_the_directory_and_file_modes(saved: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(saved.stat().st_mode) == 0o777 & ~umask  # a new index: what mkdir makes, not 0700
    saved.chmod(0o750)
    (saved / MANIFEST_FILE).chmod(0o640)
    (saved / INDEX_FILE).chmod(0o604)
    index = SearchIndex.load(saved)
    index.remove([0])
    index.save(saved)
    assert stat.S_IMODE(saved.stat().st_mode) == 0o750
    assert stat.S_IMODE((saved / MANIFEST_FILE).stat().st_mode) == 0o640
    assert stat.S_IMODE((saved / INDEX_FILE).stat().st_mode) == 0o604


def finished_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.slow
def test_a_save_removes_copies_left_by_dead_processes_only(saved: Path) -> None:
    dead, alive = finished_pid(), os.getpid()
    leftovers = {
        f".index.{dead}.0123abcd.tmp": False,  # a killed save's new copy
        f".index.{dead}.89abcdef.old": False,  # a killed save's previous copy, set aside
        f".index.{alive}.0123abcd.tmp": True,  # a save in progress
        f".other.{dead}.0123abcd.tmp": True,  # another index's
        ".index.k3x_9q2z.tmp": True,  # no pid in the name: whose it is cannot be told
    }
    for name in leftovers:
        shutil.copytree(saved, saved.parent / name)
    index = SearchIndex.load(saved)
    index.remove([0])
    index.save(saved)
    assert hidden_entries(saved.parent) == sorted(name for name, kept in leftovers.items() if kept)


@pytest.mark.slow
def test_the_copy_a_killed_save_leaves_is_removed_by_the_next_save(saved: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os
        from retrieval.index import SearchIndex
        from retrieval.index.metadata import Metadata

        def die_midway(self, path):
            os._exit(9)

        Metadata.write = die_midway
        index = SearchIndex.load({str(saved)!r})
        index.remove([0])
        index.save({str(saved)!r})
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    assert subprocess.run([sys.executable, "-c", script], env=env, timeout=120).returncode == 9
    (leftover,) = hidden_entries(saved.parent)
    assert (saved.parent / leftover / INDEX_FILE).stat().st_size > 0
    index = SearchIndex.load(saved)
    index.remove([1])
    index.save(saved)
    assert hidden_entries(saved.parent) == []


def put(key: str, value):
    return lambda manifest: manifest.update({key: value})


def put_file_size(manifest) -> None:
    manifest["files"][INDEX_FILE]["size"] = "1024"


@pytest.mark.usefixtures("no_faiss_read")
@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (put("count", "500"), "count"),
        (put("dimension", 32.0), "dimension"),
        (put("files", [INDEX_FILE, METADATA_FILE]), "files"),
        (put_file_size, "files"),
        (put("kind", "fast"), "kind"),
        (put("removed_ids", ["7"]), "removed_ids"),
        (put("normalized", "yes"), "normalized"),
        (put("search_parameters", {"nprobe": "8"}), "search_parameters"),
        (put("version", "1"), "version"),
        (put("model", "best.pt"), "model"),
        (put("stored", None), "stored"),
        (put("target_recall", 1.5), "target_recall"),
        (put("match_threshold", {"score": "0.5"}), "match_threshold"),
    ],
)
def test_a_hand_edited_field_of_the_wrong_type_is_named(saved: Path, edit, field: str) -> None:
    path = saved / MANIFEST_FILE
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=rf"{MANIFEST_FILE}\.{field} must be .*; fix it or rebuild the index"):
        SearchIndex.load(saved)


@pytest.mark.usefixtures("no_faiss_read")
@pytest.mark.parametrize("key", ["kind", "next_id", "files", "count"])
def test_a_missing_field_is_named(saved: Path, key: str) -> None:
    path = saved / MANIFEST_FILE
    manifest = json.loads(path.read_text())
    del manifest[key]
    path.write_text(json.dumps(manifest))
    with pytest.raises(UserError, match=rf"lacks {key}; rebuild the index"):
        SearchIndex.load(saved)


FIRST_FORMAT_KEYS = (
    "format",
    "version",
    "dimension",
    "metric",
    "normalized",
    "factory",
    "kind",
    "count",
    "next_id",
    "files",
)


def test_a_manifest_of_the_first_format_loads_searches_and_saves_as_it_was(saved: Path) -> None:
    # Version 1 as first written: none of the fields added since (stored, removed ids, tuning, model, threshold).
    path = saved / MANIFEST_FILE
    first = {key: value for key, value in json.loads(path.read_text()).items() if key in FIRST_FORMAT_KEYS}
    path.write_text(json.dumps(first))
    index = SearchIndex.load(saved)
    assert index.manifest.as_dict() == first and index.ntotal == 500
    assert index.search(index.reconstruct(7), k=1)[1][0, 0] == 7
    index.remove([3])
    index.save(saved)
    assert SearchIndex.load(saved).ntotal == 499


# The nested entries as the toolkit before typed records wrote them (a shard of a merge's split, measured).
_BASE_ENTRIES = {
    "measured": {
        "recall_at_k": 0.98,
        "k": 10,
        "neighbors": 10,
        "queries": 50,
        "p50_ms": 0.1,
        "p99_ms": 0.3,
        "batch_qps": 9000.0,
        "batch_threads": 2,
        "resident_bytes_per_vector": 136.0,
        "disk_bytes_per_vector": 136.0,
        "queries_from": "50 build vectors held out while measuring",
        "reference": "exact inner-product search over the original vectors",
    },
    "model": {
        "checkpoint": "/runs/a/best.pt",
        "checkpoint_sha256": "ab" * 32,
        "model_config": {"backbone": "x"},
        "embedding_dim": 32,
        "image_size": 64,
        "transform": {"eval_mode": "resize"},
    },
    "sources": [{"path": "/data/a.npy", "rows": 300, "bytes": 38528}, {"path": "/data/parts", "rows": 200}],
    "trained": "cd" * 32,
    "first_id": 0,
    "shard": {"number": 0, "count": 2, "inputs": [{"path": "/data/a.npy", "rows": 300, "fingerprint": "ef" * 32}]},
}


@pytest.mark.usefixtures("no_faiss_read")
def test_a_manifest_of_the_untyped_layout_loads_and_saves_unchanged(saved: Path, tmp_path: Path) -> None:
    path = saved / MANIFEST_FILE
    manifest = {**json.loads(path.read_text()), **_BASE_ENTRIES}
    path.write_text(json.dumps(manifest))
    loaded = read_verified_manifest(saved)
    assert loaded.shard is not None and loaded.shard.inputs[0].rows == 300 and loaded.measured.recall_at_k == 0.98
    assert loaded.sources is not None and loaded.sources[1].bytes is None and loaded.model.identity == "ab" * 32
    assert loaded.as_dict() == manifest  # written back key for key, no nulls added


@pytest.mark.usefixtures("no_faiss_read")
@pytest.mark.parametrize(
    ("entry", "value", "expected"),
    [
        (
            "shard",
            {"number": 0, "count": 2, "inputs": [{"path": "a.npy", "rows": 3}]},
            "inputs.0.fingerprint is missing",
        ),
        ("sources", [{"path": "a.npy", "rows": "300"}], 'a list of {"path", "rows"} objects'),
        ("measured", {"recall_at_k": "high"}, "an object of measurements"),
        ("merged_from", [{"path": "a", "count": 3}], "merged_from.0.first_id is missing"),
    ],
)
def test_a_nested_entry_of_the_wrong_shape_is_one_line_naming_file_field_and_shape(
    saved: Path, entry: str, value: object, expected: str
) -> None:
    path = saved / MANIFEST_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), entry: value}))
    with pytest.raises(UserError) as caught:
        read_verified_manifest(saved)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}.{entry}") and expected in message
    assert message.endswith("; fix it or rebuild the index")
