"""`index export`: the collection searches like FAISS flat, filters pass the same items, re-runs change nothing."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from retrieval.cli.main import main
from retrieval.errors import UserError
from retrieval.index import SearchIndex, clustered_unit_vectors, exact_neighbors
from retrieval.index.filter_language import parse_where
from retrieval.rerank import IndexGallery, KReciprocal
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.collection_index import CollectionIndex
from retrieval.vectordb.qdrant_store import QdrantStore
from retrieval.vectordb.upload import export_index

K = 10


@pytest.fixture(scope="module")
def collection(exported):
    opened = CollectionIndex.open(exported.location)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def queries():
    vectors, _ = clustered_unit_vectors(30, 16, n_clusters=12, seed=0)  # same centres as the gallery, new noise
    return vectors + np.random.default_rng(1).normal(0, 0.05, vectors.shape).astype(np.float32)


def test_top_10_equals_faiss_flat(exported, collection, queries):
    flat_scores, flat_ids = exported.index.search(queries, K)
    scores, ids = collection.search(queries, K)
    overlap = np.mean([len(set(a) & set(b)) / K for a, b in zip(ids, flat_ids, strict=True)])
    assert overlap >= 0.99
    np.testing.assert_allclose(scores, flat_scores, atol=1e-5)  # cosine of unit vectors = the inner product


def test_points_hold_the_index_vectors_ids_and_metadata(exported, collection):
    assert collection.ntotal == exported.index.ntotal and collection.ids.tolist() == exported.index.ids.tolist()
    for item in (0, 17, 99):
        np.testing.assert_allclose(collection.reconstruct(item), exported.vectors[item], atol=1e-6)
    wanted = [99, 0, 13, 17]
    assert collection.metadata_for(wanted) == exported.index.metadata_for(wanted)  # nulls stay null
    with pytest.raises(UserError, match="unknown id"):
        collection.metadata_for([0, 10_000])


def test_vectors_come_back_in_the_order_asked_and_rerank_like_faiss(exported, collection, queries):
    wanted = [99, 0, 13, 0, 17]  # out of order and repeated
    np.testing.assert_allclose(collection.vectors(wanted), exported.index.vectors(wanted), atol=1e-6)
    np.testing.assert_allclose(collection.vectors(wanted), exported.vectors[wanted], atol=1e-6)
    with pytest.raises(UserError, match="unknown id"):
        collection.vectors([0, 10_000])
    method = KReciprocal(k1=4, k2=2, shortlist=12)
    _, expected = method.search(IndexGallery(exported.index), queries, K)
    _, ids = method.search(IndexGallery(collection), queries, K)
    np.testing.assert_array_equal(ids, expected)


def test_the_record_identifies_the_index(exported, collection):
    manifest = exported.index.manifest.as_dict()
    record = collection.record
    assert record.complete and record.dimension == 16
    assert record.manifest["created"] == manifest["created"] and record.model == manifest["model"]
    assert "files" not in record.manifest and record.metadata_schema() == exported.index.metadata_schema


FILTERS = [
    "label in (3, 5) and price < 50",
    "ok = true",
    'shop = "it\'s"',  # a quote inside a string
    "price >= 20 and price <= 22.5",
    "label = 7 and shop = 'b'",
    "label in (2.5, 4)",  # an integer column against a fraction
    "price = 50",  # a float column against an integer
    "ok in (true, false)",  # every non-null
    "label > 100",  # nothing
    "id < 10",  # the point id, not a payload field
    "id in (1, 2, 3, 500) or id = 2.5",
    "id >= 20 and id != 50 and id not in (60, 61) and not id is null",
    "id > 97.5 or id <= -1",
    "label = 3 or (shop = 'a' and not price < 50)",
    "label != 3 and shop <> 'b'",  # nulls pass neither
    "label not in (1, 2, 3)",
    "price is null or ok is null",
    "label is not null and not (ok = true)",  # not passes the nulls of ok
]


@pytest.mark.parametrize("where", FILTERS)
def test_filtered_search_equals_faiss_and_brute_force_over_the_passing_items(exported, collection, queries, where):
    condition = parse_where(where)
    index = exported.index
    table = pa.Table.from_pylist(index.metadata_for(index.ids), schema=index.metadata_schema)
    passing = index.ids[condition.mask(table)]
    for query in queries[:5]:
        scores, ids = collection.search(query, K, filter=condition)
        truth = passing[exact_neighbors(exported.vectors[passing], query[None], K)[0]] if len(passing) else []
        found = ids[0][ids[0] >= 0]
        assert found.tolist() == list(truth)[: len(found)] and len(found) == min(K, len(passing))
        assert np.all(scores[0][len(found) :] == -np.inf)
        faiss_scores, faiss_ids = index.search(query, K, filter=condition)
        assert ids.tolist() == faiss_ids.tolist()
        np.testing.assert_allclose(scores, faiss_scores, atol=1e-5)


def test_filters_that_do_not_fit_the_metadata_are_refused(collection):
    query = np.ones(16, dtype=np.float32)
    with pytest.raises(UserError, match="not in the metadata"):
        collection.search(query, K, filter=parse_where("colour = 'red'"))
    with pytest.raises(UserError, match="holds numbers"):
        collection.search(query, K, filter=parse_where("label = 'x'"))
    with pytest.raises(UserError, match="with = and in only"):
        collection.search(query, K, filter=parse_where("shop < 'b'"))


def test_a_second_export_writes_nothing(exported, collection, snapshot, monkeypatch):
    collection.close()  # local mode: one client per folder
    before = snapshot(exported.location)
    writes = []
    for name in ("upsert", "delete", "write_record", "create", "drop"):
        original = getattr(QdrantStore, name)
        monkeypatch.setattr(QdrantStore, name, lambda self, *a, _n=name, _o=original: writes.append(_n) or _o(self, *a))
    summary = export_index(exported.index_dir, exported.location, progress=False)
    assert (summary.written, summary.kept, summary.deleted) == (0, exported.index.ntotal, 0)
    assert writes == [] and snapshot(exported.location) == before


def test_remove_and_add_then_export_mirrors_the_index(tmp_path, build_index, local_uri, snapshot):
    index, vectors = build_index(tmp_path / "index", n=30)
    location = parse_database_uri(local_uri(tmp_path / "db"))
    export_index(tmp_path / "index", location, batch_size=16, progress=False)
    with SearchIndex.edit(tmp_path / "index") as edited:
        edited.remove([3, 4, 29])
        edited.add(vectors[:2], {"path": ["x.png", "y.png"], "label": [1, 2]})  # ids 30, 31
    summary = export_index(tmp_path / "index", location, batch_size=16, progress=False)
    assert (summary.vectors, summary.written, summary.deleted) == (29, 2, 3)
    fresh = parse_database_uri(local_uri(tmp_path / "fresh"))
    export_index(tmp_path / "index", fresh, progress=False)
    assert snapshot(location) == snapshot(fresh)


def test_ivfpq_exports_the_exact_vectors(tmp_path, build_index, local_uri):
    """ivfpq searches 4-bit codes but keeps the full vectors for re-ranking: those are exported."""
    index, vectors = build_index(tmp_path / "index", n=40, kind="ivfpq")
    location = parse_database_uri(local_uri(tmp_path / "db"))
    export_index(tmp_path / "index", location, progress=False)
    collection = CollectionIndex.open(location)
    try:
        np.testing.assert_allclose(np.stack([collection.reconstruct(i) for i in range(40)]), vectors, atol=1e-6)
    finally:
        collection.close()


def test_another_index_is_refused_unless_recreate(tmp_path, build_index, local_uri, capsys):
    build_index(tmp_path / "one", n=20, seed=1)
    build_index(tmp_path / "two", n=30, seed=2)
    uri = local_uri(tmp_path / "db")
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
def test_a_damaged_local_folder_is_one_line_naming_the_file(tmp_path, build_index, local_uri, capsys, damage):
    build_index(tmp_path / "index", n=10)
    uri = local_uri(tmp_path / "db")
    assert main(["index", "export", "--index", str(tmp_path / "index"), "--to", uri]) == 0
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


def test_a_collection_not_written_by_export_is_refused(tmp_path, local_uri, build_index):
    from qdrant_client import QdrantClient, models

    build_index(tmp_path / "index", n=10)
    client = QdrantClient(path=str(tmp_path / "db"))
    client.create_collection("gallery", vectors_config=models.VectorParams(size=16, distance=models.Distance.DOT))
    client.close()
    location = parse_database_uri(local_uri(tmp_path / "db"))
    with pytest.raises(UserError, match="not written by `retrieval index export`"):
        export_index(tmp_path / "index", location, progress=False)
    with pytest.raises(UserError, match="not written by `retrieval index export`"):
        CollectionIndex.open(location)
    with pytest.raises(UserError, match="does not exist"):
        CollectionIndex.open(parse_database_uri(local_uri(tmp_path / "db", "other")))
    with pytest.raises(UserError, match="no local Qdrant database"):
        CollectionIndex.open(parse_database_uri(local_uri(tmp_path / "missing")))


def test_a_server_gets_a_payload_index_per_filterable_column(exported):
    from qdrant_client import models

    from retrieval.vectordb.qdrant_filters import payload_index_kinds

    kinds = payload_index_kinds(exported.index.metadata_schema)
    assert kinds == {
        "path": models.PayloadSchemaType.KEYWORD,
        "label": models.PayloadSchemaType.INTEGER,
        "price": models.PayloadSchemaType.FLOAT,
        "shop": models.PayloadSchemaType.KEYWORD,
        "ok": models.PayloadSchemaType.BOOL,
    }
