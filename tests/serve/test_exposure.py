"""What the API gives away: no absolute path, no private manifest field, no API description unless asked."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from retrieval.index import SearchIndex
from retrieval.serve import create_app
from retrieval.serve.public import PublicPaths
from retrieval.serve.responses import SearchResponse
from tests.conftest import TINY_BACKBONE


@pytest.fixture(scope="module")
def client(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client


def test_search_and_items_show_paths_relative_to_the_common_folder(client, gallery):
    disk = str(gallery.paths[0].parent)
    answer = client.post("/search", json={"id": 0, "k": 5})
    assert disk not in answer.text and str(gallery.index_dir.parent) not in answer.text
    for result in answer.json()["results"]:
        assert result["path"] == result["metadata"]["path"] == gallery.paths[result["id"]].name
    item = client.get("/items/2")
    assert disk not in item.text and item.json()["path"] == gallery.paths[2].name


def test_info_keeps_the_manifests_private_fields(client, gallery):
    info = client.get("/info")
    assert str(gallery.checkpoint) not in info.text and str(gallery.index_dir) not in info.text
    fields = info.json()
    for private in ("removed_ids", "toolkit_version", "faiss_version", "files", "next_id"):
        assert private not in fields
    assert "checkpoint" not in fields["model"] and "weights" not in fields["model"]["model_config"]
    assert fields["count"] == len(gallery.ids) and fields["model"]["model_config"]["backbone"] == TINY_BACKBONE


def test_openapi_and_docs_only_behind_the_flag(gallery, serving, serve_limits, client):
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert client.get(path).status_code == 404
    with serving(create_app(gallery.index_dir, device="cpu", limits=serve_limits, openapi=True)) as url:
        assert "/search" in httpx.get(f"{url}/openapi.json").json()["paths"]
        assert httpx.get(f"{url}/docs").status_code == 200


def test_the_openapi_schema_describes_each_answer(gallery, serving, serve_limits, client):
    """`/search`, `/items/{id}` and `/healthz` name their response models, and a real answer fits its model."""
    with serving(create_app(gallery.index_dir, device="cpu", limits=serve_limits, openapi=True)) as url:
        schema = httpx.get(f"{url}/openapi.json").json()
    answers = {
        path: schema["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"]
        for path, method in (("/search", "post"), ("/items/{item_id}", "get"), ("/healthz", "get"))
    }
    assert answers == {
        "/search": {"$ref": "#/components/schemas/SearchResponse"},
        "/items/{item_id}": {"$ref": "#/components/schemas/Item"},
        "/healthz": {"$ref": "#/components/schemas/Health"},
    }
    models = schema["components"]["schemas"]
    assert set(models["SearchResult"]["properties"]) == {"id", "label", "path", "metadata", "thumb", "score"}
    answer = client.post("/search", json={"id": 1, "k": 3}).json()
    assert SearchResponse.model_validate(answer).query.id == 1 and set(answer) == set(
        models["SearchResponse"]["properties"]
    )
    assert set(client.get("/items/1").json()) == set(models["Item"]["properties"])


def test_an_image_root_shows_paths_under_it_and_hides_the_others(tmp_path, serving, serve_limits):
    root = tmp_path / "photos"
    paths = [str(root / "a" / "1.jpg"), str(tmp_path / "elsewhere" / "2.jpg"), "relative/3.jpg", "../4.jpg"]
    vectors = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    SearchIndex.build(vectors, kind="flat", metadata={"path": paths}, progress=False).save(tmp_path / "index")
    app = create_app(tmp_path / "index", device="cpu", limits=serve_limits, image_root=root)
    with serving(app) as url, httpx.Client(base_url=url) as client:
        shown = [client.get(f"/items/{i}").json()["path"] for i in range(4)]
    assert shown == ["a/1.jpg", None, "relative/3.jpg", None]


def test_the_default_root_is_the_deepest_folder_holding_every_image():
    paths = PublicPaths.common_root(["/data/set/a/1.png", "/data/set/b/2.png", None])
    assert paths.root == "/data/set" and paths.show("/data/set/a/1.png") == "a/1.png"
    assert paths.show("/data/other/3.png") is None and paths.show("/data/set/../set2/x.png") is None
    assert PublicPaths.common_root(["/data/one/1.png"]).show("/data/one/1.png") == "1.png"
    assert PublicPaths.common_root([None]).show("/data/one/1.png") is None
