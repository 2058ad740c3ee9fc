"""Decoded pixels are bounded across requests: parallel uploads of a large image queue or get 503, memory stays flat."""

from __future__ import annotations

import io
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from PIL import Image

from retrieval.serve.budget import DecodeBudget, ServerBusy
from retrieval.serve.uploads import BYTES_PER_PIXEL

PARALLEL = 8


@pytest.fixture(scope="module")
def large_png() -> bytes:
    """36 megapixels of one colour: about 100 KB of PNG, several hundred MB once decoded."""
    buffer = io.BytesIO()
    Image.new("RGB", (6000, 6000), (120, 30, 200)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.slow
def test_parallel_large_uploads_stay_within_the_decode_memory(gallery, serve_process, large_png):
    """Defaults: 1 GiB of decode memory holds one 36-megapixel image (20 B a pixel); the others wait or get 503."""
    with serve_process("--index", str(gallery.index_dir), "--device", "cpu") as server:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            small = gallery.paths[0].read_bytes()
            assert client.post("/search", files={"image": ("q.png", small, "image/png")}).status_code == 200
        before = server.peak_rss_bytes()

        def upload(_: int) -> httpx.Response:
            with httpx.Client(base_url=server.url, timeout=120) as client:
                return client.post("/search", files={"image": ("big.png", large_png, "image/png")}, data={"k": "3"})

        with ThreadPoolExecutor(PARALLEL) as pool:
            responses = list(pool.map(upload, range(PARALLEL)))
        grown = server.peak_rss_bytes() - before

    statuses = sorted(response.status_code for response in responses)
    assert set(statuses) <= {200, 503} and 200 in statuses, statuses
    for response in responses:
        if response.status_code == 503:
            assert response.headers["retry-after"] == "1" and "busy" in response.json()["error"]
    one_image = 6000 * 6000 * BYTES_PER_PIXEL
    assert grown < one_image, f"peak RSS grew by {grown / 2**20:.0f} MiB under {PARALLEL} parallel uploads"


def test_the_budget_lets_small_images_share_it_and_refuses_after_the_wait():
    budget = DecodeBudget(capacity=100, wait=0.05)
    with budget.hold(40), budget.hold(40):
        assert budget.free == 20
        with pytest.raises(ServerBusy), budget.hold(30):
            pass
    assert budget.free == 100


def test_a_waiting_image_gets_the_memory_when_it_is_handed_back():
    budget = DecodeBudget(capacity=100, wait=5)
    held, done = threading.Event(), threading.Event()

    def hold_briefly() -> None:
        with budget.hold(100):
            held.set()
            done.wait(5)

    thread = threading.Thread(target=hold_briefly)
    thread.start()
    held.wait(5)
    threading.Timer(0.1, done.set).start()
    with budget.hold(60):
        assert budget.free == 40
    thread.join(5)
