"""HTTP manners: HEAD on GET routes, a stalled body closed within the timeout, EXIF orientation as the model sees it."""

from __future__ import annotations

import dataclasses
import io
import socket
import time
from urllib.parse import urlparse

import httpx
import numpy as np
import pytest
from PIL import Image

from retrieval.index import SearchIndex
from retrieval.serve import create_app

_BODY_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def client(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client


@pytest.mark.parametrize("path", ["/", "/healthz", "/info", "/items/1", "/thumb/1"])
def test_get_routes_answer_head_without_a_body(client, path):
    head, get = client.head(path), client.get(path)
    assert head.status_code == get.status_code == 200
    assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]


def _stalled_upload(url: str, declared: int, sent: bytes) -> tuple[bytes, float]:
    """Send headers and part of a body over a raw socket, then stall: `(what came back, seconds until closed)`."""
    address = urlparse(url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as raw:
        head = f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {declared}"
        raw.sendall(head.encode() + b"\r\n\r\n" + sent)
        started, received = time.monotonic(), b""
        while chunk := raw.recv(65536):  # b"" once the server closes the connection
            received += chunk
        return received, time.monotonic() - started


def test_a_body_that_stalls_gets_408_and_its_connection_closed(gallery, serving, serve_limits):
    limits = dataclasses.replace(serve_limits, body_timeout=_BODY_TIMEOUT)
    with serving(create_app(gallery.index_dir, device="cpu", limits=limits)) as url:
        received, seconds = _stalled_upload(url, declared=1000, sent=b'{"vector": [' + b"0.1, " * 50)
        assert received.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in received
        assert seconds < _BODY_TIMEOUT + 3
        assert httpx.get(f"{url}/healthz").status_code == 200


def _jpeg(image: Image.Image, orientation: int | None = None) -> bytes:
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=95, exif=exif)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def upright() -> Image.Image:
    """Tall and not symmetric: red on top, blue below, so that a quarter turn is visible in any embedding."""
    pixels = np.zeros((80, 40, 3), np.uint8)
    pixels[:40] = (230, 20, 20)
    pixels[40:] = (20, 20, 230)
    return Image.fromarray(pixels)


def test_a_thumbnail_follows_the_exif_orientation(gallery, tmp_path, serving, serve_limits, upright):
    """Orientation 6: the stored pixels are turned a quarter; a viewer (and the model) turns them back."""
    stored = tmp_path / "rotated.jpg"
    stored.write_bytes(_jpeg(upright.transpose(Image.Transpose.ROTATE_90), orientation=6))
    vectors = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    SearchIndex.build(vectors, kind="flat", metadata={"path": [str(stored)]}, progress=False).save(tmp_path / "i")
    with serving(create_app(tmp_path / "i", device="cpu", limits=serve_limits)) as url:
        thumb = Image.open(io.BytesIO(httpx.get(f"{url}/thumb/0").content)).convert("RGB")
    width, height = thumb.size
    assert height > width  # upright: tall, like the original
    top, bottom = np.asarray(thumb)[height // 4, width // 2], np.asarray(thumb)[3 * height // 4, width // 2]
    assert top[0] > 150 > top[2] and bottom[2] > 150 > bottom[0]  # red on top, blue below


def test_an_upload_is_embedded_upright(client, upright):
    """A rotated upload with its EXIF orientation finds exactly what the upright image finds."""
    rotated = _jpeg(upright.transpose(Image.Transpose.ROTATE_90), orientation=6)

    def results(data: bytes) -> list[tuple[int, float]]:
        answer = client.post("/search", files={"image": ("q.jpg", data, "image/jpeg")}, data={"k": "5"}).json()
        return [(r["id"], r["score"]) for r in answer["results"]]

    expected, found = results(_jpeg(upright)), results(rotated)
    assert [i for i, _ in found] == [i for i, _ in expected]
    np.testing.assert_allclose([s for _, s in found], [s for _, s in expected], atol=0.02)
