"""`retrieval index export` and `serve --backend` of a collection: the printed counts and the one-line refusals.

What an export writes and how the collection searches is tested through the library in tests/vectordb/.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from retrieval.cli.main import main
from retrieval.index import SearchIndex, clustered_unit_vectors
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.upload import export_index
from tests.index.test_metadata_types import VECTORS, N
from tests.vectordb.conftest import local_collection_uri, save_gallery_index


def test_another_index_is_refused_unless_recreate(tmp_path, capsys):
    save_gallery_index(tmp_path / "one", n=20, seed=1)
    save_gallery_index(tmp_path / "two", n=30, seed=2)
    uri = local_collection_uri(tmp_path / "db")
    assert main(["index", "export", "--index", str(tmp_path / "one"), "--to", uri]) == 0
    assert "20 vectors (20 written, 0 already there, 0 removed)" in capsys.readouterr().out
    two = SearchIndex.load(tmp_path / "two")
    two.manifest.created = "2000-01-01T00:00:00+00:00"  # a rebuild within the same second would share its time
    two.save(tmp_path / "two")
    assert main(["index", "export", "--index", str(tmp_path / "two"), "--to", uri]) == 2
    assert "holds another index" in capsys.readouterr().err
    assert main(["index", "export", "--index", str(tmp_path / "two"), "--to", uri, "--recreate"]) == 0
    assert "30 vectors (30 written" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["storage", "meta"])
def test_a_damaged_local_folder_is_one_line_naming_the_file(tmp_path, capsys, damage):
    save_gallery_index(tmp_path / "index", n=10)
    uri = local_collection_uri(tmp_path / "db")
    export_index(tmp_path / "index", parse_database_uri(uri), progress=False)  # what `index export` runs
    damaged = tmp_path / "db" / "collection" / "gallery" / "storage.sqlite"
    if damage == "storage":
        damaged.write_bytes(b"garbage, not a database\n")
    else:
        damaged = tmp_path / "db" / "meta.json"
        damaged.write_text(damaged.read_text()[:20])
    capsys.readouterr()
    assert main(["serve", "--backend", uri, "--port", "0"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"is damaged: {damaged} cannot be read" in line and "export the index again" in line


@pytest.mark.parametrize("name", ['say "hi"', "back\\slash", ""])
def test_a_column_name_qdrant_cannot_quote_is_refused_at_export_in_one_line(tmp_path, name, capsys):
    vectors, _ = clustered_unit_vectors(4, 16, n_clusters=2, seed=0)
    SearchIndex.build(vectors, {name: [1, 2, 3, 4]}, kind="flat", progress=False).save(tmp_path / "index")
    uri = f"qdrant+local://{tmp_path / 'db'}?collection=c"
    assert main(["index", "export", "--index", str(tmp_path / "index"), "--to", uri]) == 2
    error = capsys.readouterr().err.strip()
    assert f"metadata column {name!r} cannot be named in a Qdrant filter" in error and "\n" not in error
    assert not (tmp_path / "db").exists() or not any((tmp_path / "db").rglob("*.sqlite"))  # nothing written


def test_an_index_holding_a_refused_type_is_refused_at_export_before_anything_is_written(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Defect 9, for an index an earlier version built: one line, and no collection left marked incomplete."""
    monkeypatch.setattr("retrieval.index.metadata.check_metadata", lambda table, source: None)
    blobs = pa.array([b"\xff\xfe"] * N, pa.binary())
    SearchIndex.build(VECTORS, pa.table({"blob": blobs}), kind="flat", progress=False).save(tmp_path / "index")
    uri = f"qdrant+local://{tmp_path / 'db'}?collection=c"
    assert main(["index", "export", "--index", str(tmp_path / "index"), "--to", uri]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: metadata column 'blob' of index {tmp_path / 'index'} has type binary")
    assert "\n" not in error
    assert not (tmp_path / "db").exists() or not any((tmp_path / "db").rglob("*.sqlite"))


def test_an_index_holding_uint64_past_int64_is_refused_at_export(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("retrieval.index.metadata.check_metadata", lambda table, source: None)
    big = pa.array([0, 2**63, 1, 2, 3, 4], pa.uint64())
    SearchIndex.build(VECTORS, pa.table({"u64": big}), kind="flat", progress=False).save(tmp_path / "index")
    uri = f"qdrant+local://{tmp_path / 'db'}?collection=c"
    assert main(["index", "export", "--index", str(tmp_path / "index"), "--to", uri]) == 2
    assert "holds 9223372036854775808 (row 2)" in capsys.readouterr().err
    assert not (tmp_path / "db").exists() or not any((tmp_path / "db").rglob("*.sqlite"))
