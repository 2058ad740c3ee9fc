"""`index export`: the collection searches like FAISS flat, filters pass the same items, re-runs change nothing.

The command's printed counts and one-line refusals are tested in tests/cli/test_index_export_cli.py.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from retrieval.core.rerank import KReciprocal
from retrieval.errors import UserError
from retrieval.index import SearchIndex, clustered_unit_vectors, exact_neighbors
from retrieval.index.filter_language import parse_where
from retrieval.index.gallery import IndexGallery
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
    assert record.manifest.created == manifest["created"] and record.model.record() == manifest["model"]
    kept = record.manifest.model_dump(exclude_unset=True)
    assert "files" not in kept and record.metadata_schema() == exported.index.metadata_schema


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
    with pytest.raises(UserError, match="'<' \\(lt\\) compares numbers; strings and booleans take =, !=, in"):
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


AWKWARD = {  # names Qdrant would read as paths (`.`, `[]`) or refuse (space, `:`, `$`) unless quoted
    "a.b": [1, 1, 2, None, 3, 1],
    "x[]": [1, 2, 2, 3, None, 1],
    "unit price": [0.5, 1.5, -0.0, None, 2.5, 0.0],
    "k:v": ["p", "q", "p", None, "r", "p"],
    "$n": [True, False, None, True, True, False],
    "日本": ["é", "日", "é", "a b", None, ""],
    "big": [2**53 - 1, 2**53, 2**53 + 1, 2**53 + 2, 2**63 - 1, -(2**63)],
}
AWKWARD_FILTERS = [
    "`a.b` = 1",
    "`a.b` is null",
    "`a.b` in (2, 3) or `x[]` = 2",
    "`x[]` not in (1)",
    "`unit price` < 1 and `unit price` >= 0",
    "`unit price` in (0)",  # -0.0 and 0.0
    "`k:v` = 'p' and not `$n` = true",
    "日本 in ('é', '') or `$n` is null",
    "big < 9007199254740993",  # 2**53 + 1: as a float64 bound it would be 2**53
    "big <= 9007199254740993",
    "big > 9007199254740992",
    "big >= 9223372036854775807",
    "big < 9223372036854775807",
    "big > -9223372036854775808",
    "big <= -9223372036854775808",
    "big > 0.5",
    "big < 9007199254740992.5 and big != 9007199254740991",
]


@pytest.fixture(scope="module")
def awkward(tmp_path_factory):
    root = tmp_path_factory.mktemp("awkward")
    vectors, _ = clustered_unit_vectors(6, 16, n_clusters=2, seed=3)
    index = SearchIndex.build(vectors, AWKWARD, kind="flat", progress=False)
    index.save(root / "index")
    location = parse_database_uri(f"qdrant+local://{root / 'db'}?collection=awkward")
    export_index(root / "index", location, progress=False)
    opened = CollectionIndex.open(location)
    yield index, opened, vectors[0]
    opened.close()


@pytest.mark.parametrize("where", AWKWARD_FILTERS)
def test_any_column_name_and_int64_bound_filter_the_same_items_as_faiss(awkward, where):
    index, collection, query = awkward
    condition = parse_where(where)
    table = pa.Table.from_pylist(index.metadata_for(index.ids), schema=index.metadata_schema)
    expected = index.ids[condition.mask(table)].tolist()
    for found in (index.search(query, 6, filter=condition)[1][0], collection.search(query, 6, filter=condition)[1][0]):
        assert sorted(found[found >= 0].tolist()) == expected, where
    assert collection.metadata_for([0])[0] == index.metadata_for([0])[0]


def test_the_int64_range_bounds_agree_with_python(awkward):
    index, collection, query = awkward
    bound = 2**53 + 1
    passing = collection.search(query, 6, filter=parse_where(f"big < {bound}"))[1][0]
    assert sorted(passing[passing >= 0].tolist()) == [i for i, v in enumerate(AWKWARD["big"]) if v < bound] == [0, 1, 5]


BOUNDS = [2**53 + 1, -(2**53) - 3, 2**62 + 1, 2**63 - 1, 2**63 - 1025, -(2**63) + 1, 10**18 + 7]


@pytest.mark.parametrize("bound", BOUNDS)
@pytest.mark.parametrize("op", ["lt", "lte", "gt", "gte"])
def test_int64_ranges_are_exact_whether_qdrant_compares_integers_exactly_or_as_float64(op, bound):
    """Local mode compares a stored integer with a float bound exactly, a server may compare it as a float64."""
    import operator

    from retrieval.vectordb.qdrant_filters import to_qdrant_filter

    schema = pa.schema([("id", pa.int64()), ("big", pa.int64())])
    clause = to_qdrant_filter(parse_where(f"big {dict(lt='<', lte='<=', gt='>', gte='>=')[op]} {bound}"), schema, 1)
    compare = {"lt": operator.lt, "lte": operator.le, "gt": operator.gt, "gte": operator.ge}

    def passes(node, value: int, as_float: bool) -> bool:
        if not hasattr(node, "key") and not hasattr(node, "must"):  # is_empty: the value is there
            return False
        if hasattr(node, "must_not") and node.must_not:
            return not any(passes(child, value, as_float) for child in node.must_not)
        if hasattr(node, "must") and node.must:
            return all(passes(child, value, as_float) for child in node.must)
        if hasattr(node, "should") and node.should:
            return any(passes(child, value, as_float) for child in node.should)
        if node.match is not None:
            return value in node.match.any if hasattr(node.match, "any") else value == node.match.value
        stored = float(value) if as_float else value
        return all(compare[name](stored, limit) for name in compare if (limit := getattr(node.range, name)) is not None)

    window = [bound + step for step in range(-6000, 6001, 61)] + [bound + step for step in range(-3, 4)]
    for value in (v for v in window if -(2**63) <= v < 2**63):
        truth = compare[op](value, bound)
        assert passes(clause, value, as_float=False) == truth == passes(clause, value, as_float=True), value


def test_duplicates_come_in_id_order_as_in_faiss(tmp_path, local_uri):
    """Copies of one vector tie exactly: Qdrant sorted them its own way and FAISS kept the later ones first."""
    rng = np.random.default_rng(0)
    directions = rng.standard_normal((3, 16)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    pick = rng.integers(0, 3, 40)
    index = SearchIndex.build(directions[pick], {"x": list(range(40))}, kind="flat", progress=False)
    index.save(tmp_path / "index")
    location = parse_database_uri(local_uri(tmp_path / "db"))
    export_index(tmp_path / "index", location, progress=False)
    copies = np.flatnonzero(pick == 0)
    with_filter = parse_where("x >= 3")
    collection = CollectionIndex.open(location)
    try:
        for k, where, expected in [(3, None, copies[:3]), (3, with_filter, copies[copies >= 3][:3])]:
            faiss_scores, faiss_ids = index.search(directions[0], k, filter=where)
            scores, ids = collection.search(directions[0], k, filter=where)
            assert ids[0].tolist() == faiss_ids[0].tolist() == expected.tolist()
            np.testing.assert_allclose(scores, faiss_scores, atol=1e-5)
    finally:
        collection.close()
