"""`serve --backend`: the same page and API over a Qdrant collection answer as `serve --index` does.

That the command takes an index or a backend, not both, is `tests/cli/test_serve_cli.py`'s."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from retrieval.errors import UserError
from retrieval.serve import create_app
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.qdrant_store import QdrantStore
from retrieval.vectordb.upload import export_index


@pytest.fixture(scope="module")
def backend_uri(gallery, tmp_path_factory) -> str:
    uri = f"qdrant+local://{tmp_path_factory.mktemp('qdrant')}?collection=gallery"
    export_index(gallery.index_dir, parse_database_uri(uri), progress=False)
    return uri


@pytest.fixture(scope="module")
def clients(base_url, backend_uri, gallery, serve_limits, serving):
    """`(index, backend)`: HTTP clients of `serve --index` and `serve --backend` over the same gallery."""
    app = create_app(None, backend=backend_uri, device="cpu", limits=serve_limits)
    with serving(app) as backend_url:
        with httpx.Client(base_url=base_url, timeout=30) as index, httpx.Client(base_url=backend_url) as backend:
            yield index, backend


def _same_results(index: httpx.Response, backend: httpx.Response) -> None:
    expected, got = index.json(), backend.json()
    assert index.status_code == backend.status_code == 200, backend.text
    assert [r["id"] for r in got["results"]] == [r["id"] for r in expected["results"]]
    np.testing.assert_allclose(
        [r["score"] for r in got["results"]], [r["score"] for r in expected["results"]], atol=1e-5
    )
    assert [{**r, "score": 0} for r in got["results"]] == [{**r, "score": 0} for r in expected["results"]]


def test_uploads_vectors_and_ids_find_the_same_items(clients, gallery):
    index, backend = clients
    upload = {"files": {"image": ("q.png", gallery.paths[5].read_bytes(), "image/png")}, "data": {"k": "5"}}
    _same_results(index.post("/search", **upload), backend.post("/search", **upload))
    query = np.random.default_rng(0).normal(size=gallery.embeddings.shape[1]).tolist()
    body = {"vector": query, "k": 7}
    _same_results(index.post("/search", json=body), backend.post("/search", json=body))
    for body in ({"id": 3, "k": 4}, {"id": 0, "k": 1000}):
        _same_results(index.post("/search", json=body), backend.post("/search", json=body))


def test_filters_run_in_the_database_and_pass_the_same_items(clients, gallery):
    index, backend = clients
    label = index.get("/items/0").json()["label"]
    query = gallery.embeddings[0].tolist()
    for where in ({"split": "test"}, "split = 'train' and label = '" + label + "'", {"label": {"in": [label, "x"]}}):
        body = {"vector": query, "k": 6, "filter": where}
        _same_results(index.post("/search", json=body), backend.post("/search", json=body))
    upload = {"files": {"image": ("q.png", gallery.paths[5].read_bytes(), "image/png")}}
    form = {"data": {"k": "3", "filter": "split = 'test'"}, **upload}
    _same_results(index.post("/search", **form), backend.post("/search", **form))
    refused = backend.post("/search", json={"id": 1, "filter": {"colour": "red"}})
    assert refused.status_code == 400 and "filter column 'colour' is not in the metadata" in refused.json()["error"]


def test_items_thumbs_health_and_info(clients, gallery):
    index, backend = clients
    assert backend.get("/items/3").json() == index.get("/items/3").json()
    assert backend.get("/thumb/3").content == index.get("/thumb/3").content
    assert backend.get("/items/999").status_code == 404
    assert backend.get("/healthz").json() == {"status": "ok", "vectors": len(gallery.ids), "model": True}
    info = backend.get("/info").json()
    assert info == {**index.get("/info").json(), "backend": "qdrant"}
    assert backend.get("/").status_code == 200


def test_a_partly_exported_collection_or_another_checkpoint_is_refused(gallery, other_checkpoint, tmp_path):
    uri = f"qdrant+local://{tmp_path}?collection=gallery"
    export_index(gallery.index_dir, parse_database_uri(uri), progress=False)
    with pytest.raises(UserError, match="is not the one this index was built with"):
        create_app(None, backend=uri, checkpoint=other_checkpoint, device="cpu")
    with QdrantStore.open(parse_database_uri(uri)) as store:
        record = store.record()
        assert record is not None
        store.write_record(record.model_copy(update={"complete": False}))
    with pytest.raises(UserError, match="only partly exported; run `retrieval index export` again"):
        create_app(None, backend=uri, device="cpu")
    with pytest.raises(UserError, match="either an index directory or a database backend"):
        create_app(gallery.index_dir, backend=uri, device="cpu")


@pytest.mark.parametrize("failure", [ConnectionRefusedError(111, "Connection refused"), ValueError("lost its files")])
def test_a_failing_database_is_a_503_that_names_neither_its_folder_nor_its_url(
    gallery, serving, serve_limits, tmp_path, monkeypatch, caplog, failure
):
    """A search, item or health request the database cannot answer is not the client's fault (not a 400 or 404)."""
    uri = f"qdrant+local://{tmp_path}?collection=gallery"
    export_index(gallery.index_dir, parse_database_uri(uri), progress=False)
    app = create_app(None, backend=uri, device="cpu", limits=serve_limits)

    def fail(*args, **kwargs):
        raise failure

    client = app.state.searcher.live.current().index._store.client
    for method in ("query_batch_points", "retrieve", "count"):
        monkeypatch.setattr(client, method, fail)
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as backend:
        query = gallery.embeddings[0].tolist()
        for response in (
            backend.post("/search", json={"vector": query, "k": 3}),
            backend.post("/search", json={"id": 1, "k": 3}),
            backend.get("/items/1"),
            backend.get("/healthz"),
        ):
            assert response.status_code == 503 and response.headers["retry-after"] == "1"
            assert response.json() == {"error": "the search database did not answer; try again later"}
            assert str(tmp_path) not in response.text
    assert str(tmp_path) in caplog.text  # the operator's log keeps the detail
