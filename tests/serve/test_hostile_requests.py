"""Requests that once crashed a handler (HTTP 500, two tracebacks, a dropped connection): each is a one-line 4xx.

Every case checks the answer (status, JSON, one line), that nothing was logged as a failure,
and that the same keep-alive connection still serves the next request.
"""

from __future__ import annotations

import io
import logging
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image, PngImagePlugin

from retrieval.embedding_files.file_formats import write_embeddings
from retrieval.errors import UserError
from retrieval.export.encoder_choice import EncoderChoice
from retrieval.export.index_build import IndexBuildRequest, build_index
from retrieval.index import SearchIndex
from retrieval.serve import create_app
from retrieval.serve.uploads import ImageTooLarge, open_image, preprocess_bytes

_INFLATED = 50_000_000  # bytes a metadata chunk inflates to: Pillow refuses over 1 MB


@pytest.fixture
def client(base_url, caplog):
    caplog.set_level(logging.ERROR)
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []


def _one_line_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    message = response.json()["error"]
    assert "\n" not in message and len(message) < 300
    return message


def _still_serving(client: httpx.Client) -> None:
    assert client.post("/search", json={"id": 1, "k": 2}).status_code == 200


def _png_with_ztxt() -> bytes:
    text = PngImagePlugin.PngInfo()
    text.add_text("comment", "a" * _INFLATED, zip=True)
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "PNG", pnginfo=text)
    return buffer.getvalue()


def _png_with_iccp() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "PNG", icc_profile=b"\0" * _INFLATED)
    return buffer.getvalue()


_BOMBS = {"zTXt": _png_with_ztxt, "iCCP": _png_with_iccp}


@pytest.mark.parametrize("route", ["items", "thumb"])
def test_an_id_over_int64_in_the_path_is_unknown(client, route):
    assert "unknown id 9223372036854775808" in _one_line_error(client.get(f"/{route}/9223372036854775808"), 404)
    _still_serving(client)


def test_an_id_over_int64_in_json_is_unknown(client):
    assert "unknown id 9223372036854775808" in _one_line_error(client.post("/search", json={"id": 2**63}), 404)
    _still_serving(client)


def test_a_unicode_digit_as_the_upload_k_is_refused(client, gallery):
    files = {"image": ("q.png", gallery.paths[0].read_bytes(), "image/png")}
    assert "k must be an integer" in _one_line_error(client.post("/search", files=files, data={"k": "²"}), 400)
    _still_serving(client)


def test_a_vector_beyond_float32_is_refused(client, gallery):
    vector = [1e200] * gallery.embeddings.shape[1]
    assert "float32 range" in _one_line_error(client.post("/search", json={"vector": vector}), 400)
    _still_serving(client)


def test_a_vector_holding_ten_to_the_400_is_refused(client, gallery):
    values = ["1" + "0" * 400] + ["0"] * (gallery.embeddings.shape[1] - 1)
    body = ('{"vector": [' + ",".join(values) + "]}").encode()
    response = client.post("/search", content=body, headers={"content-type": "application/json"})
    assert "float32 range" in _one_line_error(response, 400)
    _still_serving(client)


@pytest.mark.parametrize("opening", ["[", '{"a":'])
def test_json_nested_2000_levels_is_refused(client, opening):
    closing = "]" if opening == "[" else "}"
    body = '{"vector": ' + opening * 2000 + "1" + closing * 2000 + "}"
    response = client.post("/search", content=body.encode(), headers={"content-type": "application/json"})
    assert "nested too deeply" in _one_line_error(response, 400)
    _still_serving(client)


def test_tiny_and_large_finite_vectors_still_search(client, gallery):
    """The range check refuses only what float32 cannot hold; scaling keeps the norm finite either way."""
    for scale in (1e-300, 1e30):
        vector = (gallery.embeddings[4].astype(np.float64) * scale).tolist()
        assert client.post("/search", json={"vector": vector, "k": 1}).json()["results"][0]["id"] == gallery.ids[4]


@pytest.mark.parametrize("chunk", sorted(_BOMBS))
def test_an_upload_whose_metadata_chunk_inflates_to_50_mb_is_refused(client, chunk):
    files = {"image": ("bomb.png", _BOMBS[chunk](), "image/png")}
    assert "cannot read the image header" in _one_line_error(client.post("/search", files=files), 400)
    _still_serving(client)


@pytest.mark.parametrize("chunk", sorted(_BOMBS))
def test_an_indexed_file_whose_metadata_chunk_inflates_is_a_404_thumbnail(
    chunk, tmp_path, serving, serve_limits, caplog
):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_BOMBS[chunk]())
    vectors = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    SearchIndex.build(vectors, kind="flat", metadata={"path": [str(bomb), None]}, progress=False).save(tmp_path / "i")
    caplog.set_level(logging.ERROR)
    app = create_app(tmp_path / "i", device="cpu", limits=serve_limits)
    with serving(app) as url, httpx.Client(base_url=url) as client:
        assert "cannot be read" in _one_line_error(client.get("/thumb/0"), 404)
        assert client.get("/healthz").status_code == 200
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []


def _thin_png(height: int) -> bytes:
    """A 1 x `height` PNG of one colour: a few hundred bytes, and few pixels, however tall."""
    buffer = io.BytesIO()
    Image.new("RGB", (1, height), (9, 9, 9)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def center_crop_index(tmp_path_factory, checkpoint_factory) -> tuple[Path, Path]:
    """A flat index of random vectors, recording a 32-pixel center_crop checkpoint (the photo recipe's eval)."""
    root = tmp_path_factory.mktemp("center_crop")
    checkpoint = checkpoint_factory(root / "best.pt", eval_mode="center_crop")
    vectors = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    write_embeddings(root / "e.npy", vectors, [f"/img/{i}.png" for i in range(8)], ["0"] * 8)
    encoder = EncoderChoice(checkpoint=checkpoint)  # `index build --embeddings E.npy --checkpoint CKPT --type flat`
    build_index(IndexBuildRequest(root / "index", encoder, embeddings=(root / "e.npy",), kind="flat"))
    return root / "index", checkpoint


@pytest.mark.slow
def test_an_elongated_upload_that_center_crop_scales_up_is_a_quick_413(center_crop_index, serving, gallery, caplog):
    """1 x 400,000 resizes to 32 x 12,800,000 before the crop: refused from its header, not after 30 s and 3.7 GB."""
    index_dir, checkpoint = center_crop_index
    caplog.set_level(logging.ERROR)
    app = create_app(index_dir, checkpoint, device="cpu")  # the default limits: 40 megapixels
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        for height in (400_000, 2_000_000):
            started = time.perf_counter()
            response = client.post("/search", files={"image": ("thin.png", _thin_png(height), "image/png")})
            assert time.perf_counter() - started < 5
            message = _one_line_error(response, 413)
            assert f"1x{height} pixels" in message and "aspect ratio at most 39,062:1" in message
        files = {"image": ("q.png", gallery.paths[0].read_bytes(), "image/png")}
        assert client.post("/search", files=files).status_code == 200
    assert [record for record in caplog.records if record.levelno >= logging.ERROR] == []


def test_the_resized_image_counts_in_the_cap_and_the_reserved_bytes():
    image = open_image(_thin_png(1000), max_pixels=10_000)
    assert preprocess_bytes(image, (36, 36_000), max_pixels=2_000_000) == 1000 * 20 + 36 * 36_000 * 8
    with pytest.raises(ImageTooLarge, match=r"resize to 36x36000 \(1,296,000\).* at most 771:1"):
        preprocess_bytes(image, (36, 36_000), max_pixels=1_000_000)
    with pytest.raises(UserError, match="image too thin for this model: 1x1000 pixels .* at most 32:1"):
        preprocess_bytes(image, (0, 32), max_pixels=1_000_000)  # pad_square's shorter side truncates to 0
