"""Every endpoint of the real server (uvicorn on a loopback port), against brute-force references."""

from __future__ import annotations

import io
import json
import shutil
import struct
import threading
import time
import zlib

import httpx
import numpy as np
import pytest
from PIL import Image

from retrieval.inference.image_encoder import ImageEncoder
from retrieval.serve import create_app
from retrieval.serve.uploads import ImageTooLarge, open_image


@pytest.fixture(scope="module")
def client(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


def test_health_info_and_page(client, gallery):
    assert client.get("/healthz").json() == {"status": "ok", "vectors": len(gallery.ids), "model": True}
    info = client.get("/info").json()
    assert info["model"]["checkpoint_sha256"] == ImageEncoder.from_checkpoint(gallery.checkpoint).checkpoint_sha256
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert '<input id="file" type="file"' in page.text and "/static/app.js" in page.text
    assert 'fetch("/search"' in client.get("/static/app.js").text


def test_upload_finds_the_image_itself_first_and_matches_brute_force(client, gallery):
    data = gallery.paths[5].read_bytes()
    answer = client.post("/search", files={"image": ("q.png", data, "image/png")}, data={"k": "5"}).json()
    assert answer["query"] == {"type": "image"} and answer["k"] == 5
    scores, ids = gallery.exact(gallery.embeddings[5], 5)
    assert [r["id"] for r in answer["results"]] == ids.tolist()
    np.testing.assert_allclose([r["score"] for r in answer["results"]], scores, atol=1e-4)
    first = answer["results"][0]
    assert first["id"] == gallery.ids[5] and first["path"] == gallery.paths[5].name
    assert first["thumb"] == f"/thumb/{first['id']}" and first["label"] == first["metadata"]["label"]


def test_vector_search_normalizes_and_matches_brute_force(client, gallery):
    query = np.random.default_rng(0).normal(size=gallery.embeddings.shape[1])
    answer = client.post("/search", json={"vector": (3 * query).tolist(), "k": 7}).json()
    scores, ids = gallery.exact(query / np.linalg.norm(query), 7)
    assert [r["id"] for r in answer["results"]] == ids.tolist()
    np.testing.assert_allclose([r["score"] for r in answer["results"]], scores, atol=1e-5)


def test_more_like_this_leaves_the_item_out(client, gallery):
    answer = client.post("/search", json={"id": 3, "k": 4}).json()
    _, ids = gallery.exact(gallery.embeddings[3], 5)
    assert answer["query"] == {"type": "id", "id": 3}
    assert [r["id"] for r in answer["results"]] == [i for i in ids.tolist() if i != 3][:4]


def test_k_larger_than_the_index_returns_every_item(client, gallery):
    answer = client.post("/search", json={"id": 0, "k": 1000}).json()
    assert sorted(r["id"] for r in answer["results"]) == gallery.ids[1:].tolist()


def test_items_and_thumbnails(client, gallery, serve_limits):
    item = client.get("/items/2").json()
    assert item["id"] == 2 and item["path"] == gallery.paths[2].name and item["metadata"]["split"] in ("train", "test")
    first = client.get("/thumb/2")
    assert first.status_code == 200 and first.headers["content-type"] == "image/jpeg"
    thumb = Image.open(io.BytesIO(first.content))
    assert thumb.format == "JPEG" and max(thumb.size) <= serve_limits.thumb_size
    assert client.get("/thumb/2").content == first.content


def test_thumbnails_are_cached_and_bounded(app, client, serve_limits):
    cache = app.state.searcher.thumbnail
    cache.cache_clear()
    for item_id in [0, 1, 0, 1, *range(2, 12)]:
        assert client.get(f"/thumb/{item_id}").status_code == 200
    info = cache.cache_info()
    assert info.hits == 2 and info.currsize == serve_limits.thumb_cache


@pytest.fixture(scope="module")
def bomb_png() -> bytes:
    """A real decompression bomb: 1-bit 3000 x 3000 (9 M pixels > the test limit of 4 M), a few KB."""
    return _png(Image.new("1", (3000, 3000)))


def _huge_header_png() -> bytes:
    """A PNG whose header declares 100000 x 100000 pixels (Pillow itself refuses over 179 M)."""
    ihdr = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    idat = zlib.compress(b"\0" * 64)
    data_chunk = struct.pack(">I", len(idat)) + b"IDAT" + idat + struct.pack(">I", zlib.crc32(b"IDAT" + idat))
    end = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
    return b"\x89PNG\r\n\x1a\n" + chunk + data_chunk + end


def _upload(client, data: bytes, k: str = "3") -> httpx.Response:
    return client.post("/search", files={"image": ("x.png", data, "image/png")}, data={"k": k})


@pytest.mark.parametrize(
    ("request_kind", "status", "message"),
    [
        ("not_an_image", 400, "not an image"),
        ("truncated", 400, "cannot decode the image"),
        ("bomb", 413, "image too large: 3000x3000"),
        ("huge_header", 413, "image too large"),
        ("oversized", 413, "over the limit"),
        ("oversized_chunked", 413, "over the limit"),
        ("no_image_field", 400, "needs an 'image' file field"),
        ("upload_k_zero", 400, "k must be an integer between 1 and 1000"),
        ("wrong_length", 400, "vector must be a list of 16 numbers"),
        ("nan", 400, "NaN or infinity"),
        ("zeros", 400, "all zeros"),
        ("strings", 400, "numbers only"),
        ("k_zero", 400, "k must be an integer between 1 and 1000, got 0"),
        ("k_too_large", 400, "got 1001"),
        ("k_float", 400, "got 2.5"),
        ("unknown_id", 404, "unknown id 999"),
        ("id_and_vector", 400, 'either "vector" or "id"'),
        ("bad_json", 400, "invalid JSON"),
        ("wrong_content_type", 415, "multipart/form-data"),
    ],
)
def test_bad_search_requests_get_a_json_4xx_and_the_server_keeps_serving(
    client, gallery, serve_limits, bomb_png, request_kind, status, message
):
    png = gallery.paths[0].read_bytes()
    vector = gallery.embeddings[0].tolist()
    requests = {
        "not_an_image": lambda: _upload(client, b"this is text, not pixels"),
        "truncated": lambda: _upload(client, png[: len(png) // 2]),
        "bomb": lambda: _upload(client, bomb_png),
        "huge_header": lambda: _upload(client, _huge_header_png()),
        "oversized": lambda: _upload(client, b"\0" * (serve_limits.max_upload_bytes + 1)),
        "oversized_chunked": lambda: client.post(
            "/search",
            content=(b"\0" * 65536 for _ in range(serve_limits.max_upload_bytes // 65536 + 2)),
            headers={"content-type": "application/json"},
        ),
        "no_image_field": lambda: client.post("/search", files={"file": ("x.png", png, "image/png")}),
        "upload_k_zero": lambda: _upload(client, png, k="0"),
        "wrong_length": lambda: client.post("/search", json={"vector": vector[:-1]}),
        "nan": lambda: client.post(
            "/search", content=json.dumps({"vector": [float("nan"), *vector[1:]]}), headers=_JSON
        ),
        "zeros": lambda: client.post("/search", json={"vector": [0.0] * len(vector)}),
        "strings": lambda: client.post("/search", json={"vector": ["1"] * len(vector)}),
        "k_zero": lambda: client.post("/search", json={"vector": vector, "k": 0}),
        "k_too_large": lambda: client.post("/search", json={"id": 1, "k": 1001}),
        "k_float": lambda: client.post("/search", json={"id": 1, "k": 2.5}),
        "unknown_id": lambda: client.post("/search", json={"id": 999}),
        "id_and_vector": lambda: client.post("/search", json={"id": 1, "vector": vector}),
        "bad_json": lambda: client.post("/search", content=b"{not json", headers=_JSON),
        "wrong_content_type": lambda: client.post("/search", content=png, headers={"content-type": "image/png"}),
    }
    assert message in _error(requests[request_kind](), status)
    assert client.get("/healthz").status_code == 200
    assert client.post("/search", json={"id": 1, "k": 2}).status_code == 200


_JSON = {"content-type": "application/json"}


def test_unknown_items_and_non_integer_ids(client):
    assert "unknown id 999" in _error(client.get("/items/999"), 404)
    assert "unknown id -1" in _error(client.get("/thumb/-1"), 404)
    assert "item_id" in _error(client.get("/items/abc"), 422)
    assert "item_id" in _error(client.get("/thumb/1.5"), 422)


def test_only_indexed_files_are_served(client, gallery):
    for path in ("/thumb/../../etc/passwd", "/static/../app.py", "/static/%2e%2e/app.py", "/etc/passwd"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert b"import" not in response.content and b"root:" not in response.content


def test_a_missing_gallery_file_is_a_404_not_a_crash(gallery, tmp_path, serving, serve_limits):
    """The thumbnail of an item whose file was deleted after indexing."""
    index_dir = tmp_path / "index"
    shutil.copytree(gallery.index_dir, index_dir)
    app = create_app(index_dir, device="cpu", limits=serve_limits)
    moved = gallery.paths[4].with_suffix(".moved")
    gallery.paths[4].rename(moved)
    try:
        with serving(app) as url, httpx.Client(base_url=url) as client:
            assert "cannot be read" in _error(client.get("/thumb/4"), 404)
            assert client.get("/thumb/5").status_code == 200
    finally:
        moved.rename(gallery.paths[4])


def test_embedding_runs_off_the_event_loop(app, client, gallery):
    """While an upload waits for the model, other requests are still answered."""
    lock = app.state.searcher._model_lock
    lock.acquire()
    results = {}
    upload = threading.Thread(target=lambda: results.update(r=_upload(client, gallery.paths[0].read_bytes())))
    try:
        upload.start()
        time.sleep(0.2)
        started = time.perf_counter()
        assert client.get("/healthz").status_code == 200
        assert client.post("/search", json={"id": 1, "k": 2}).status_code == 200
        assert time.perf_counter() - started < 5 and "r" not in results
    finally:
        lock.release()
    upload.join(30)
    assert results["r"].status_code == 200


@pytest.mark.parametrize("image", ["bomb", "huge_header"])
def test_an_image_past_the_pixel_limit_is_refused_naming_max_pixels_not_pillows_limit(bomb_png, image):
    data = {"bomb": bomb_png, "huge_header": _huge_header_png()}[image]
    with pytest.raises(ImageTooLarge) as refused:
        open_image(data, max_pixels=4_000_000)
    message = str(refused.value)
    size = "3000x3000 pixels (9,000,000)" if image == "bomb" else "10,000,000,000 pixels"
    assert message.startswith(f"image too large: {size}; this server takes up to 4,000,000 pixels")
    assert "retrieval serve --max-pixels 4000000" in message and "larger --max-pixels" in message
    assert "178956970" not in message and "decompression bomb" not in message  # Pillow's own limit and words


def test_info_is_its_response_model_without_fields_the_manifest_lacks(client):
    from retrieval.serve.responses import IndexInfo

    info = client.get("/info").json()
    assert IndexInfo.model_validate(info).dimension == info["dimension"]
    assert "backend" not in info  # a field a file-served index does not have is left out, not null
