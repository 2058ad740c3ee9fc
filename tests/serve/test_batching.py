"""Concurrent image queries share forward passes: fewer passes, the same answers, and a bad image fails alone.

That `serve` passes its batch flags, and refuses a zero batch, is `tests/cli/test_serve_cli.py`'s."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from retrieval.errors import UserError
from retrieval.serve import create_app
from retrieval.serve.batching import BatchPolicy, EmbedBatcher

REFUSED_WIDTH = 7  # the fake model refuses images this wide, to make a batched pass raise


class FakeEncoder:
    """Embeds an image as its normalized mean colour times `sign`; records every pass's images."""

    def __init__(self, sign: float = 1.0, delay: float = 0.0) -> None:
        self.sign = sign
        self.delay = delay
        self.passes: list[list[Image.Image]] = []

    def embed_images(self, images: Sequence[Image.Image]) -> np.ndarray:
        self.passes.append(list(images))
        time.sleep(self.delay)
        if any(image.width == REFUSED_WIDTH for image in images):
            raise UserError("this model refuses images 7 pixels wide")
        means = np.stack([np.asarray(image, dtype=np.float32).mean(axis=(0, 1)) + 1 for image in images])
        return self.sign * means / np.linalg.norm(means, axis=1, keepdims=True)


def _colour(i: int, width: int = 8) -> Image.Image:
    return Image.new("RGB", (width, 8), (20 * i % 256, 255 - 20 * i % 256, 40))


def _together(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls in threads released at once; each result, or the exception it raised."""
    start = threading.Barrier(len(calls))

    def run(call: Callable[[], Any]) -> Any:
        start.wait()
        try:
            return call()
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def test_concurrent_calls_share_passes_and_each_gets_its_own_row():
    encoder = FakeEncoder(delay=0.05)
    batcher = EmbedBatcher(BatchPolicy(max_batch=16, wait=0.5), threading.Lock())
    images = [_colour(i) for i in range(8)]
    results = _together([lambda image=image: batcher.embed(encoder, image) for image in images])
    assert len(encoder.passes) < len(images) and sum(len(p) for p in encoder.passes) == len(images)
    for image, result in zip(images, results, strict=True):
        np.testing.assert_allclose(result, FakeEncoder().embed_images([image]), atol=1e-6)


def test_max_batch_1_is_one_pass_per_call():
    encoder = FakeEncoder(delay=0.01)
    batcher = EmbedBatcher(BatchPolicy(max_batch=1, wait=0.5), threading.Lock())
    _together([lambda i=i: batcher.embed(encoder, _colour(i)) for i in range(6)])
    assert [len(images) for images in encoder.passes] == [1] * 6


def test_a_full_batch_runs_at_once_though_another_image_is_decoding():
    encoder = FakeEncoder()
    batcher = EmbedBatcher(BatchPolicy(max_batch=3, wait=30), threading.Lock())
    decoding, release = threading.Event(), threading.Event()

    def slow_decode() -> None:
        decoding.set()
        release.wait(30)

    slow = threading.Thread(target=batcher.embed, args=(encoder, _colour(9), slow_decode))
    slow.start()
    decoding.wait(5)
    started = time.perf_counter()
    _together([lambda i=i: batcher.embed(encoder, _colour(i), decode=lambda: None) for i in range(3)])
    took = time.perf_counter() - started
    release.set()
    slow.join(10)
    assert took < 10  # not the 30 s wait
    assert [len(images) for images in encoder.passes] == [3, 1]


def test_a_batch_never_exceeds_max_batch():
    encoder, model = FakeEncoder(), threading.Lock()
    batcher = EmbedBatcher(BatchPolicy(max_batch=3, wait=0), model)
    with ThreadPoolExecutor(7) as pool:
        with model:  # the calls gather while the model is busy
            calls = [pool.submit(batcher.embed, encoder, _colour(i)) for i in range(7)]
            time.sleep(0.5)
        for call in calls:
            call.result()
    sizes = [len(images) for images in encoder.passes]
    assert max(sizes) == 3 and sum(sizes) == 7


def test_a_lone_call_does_not_wait():
    batcher = EmbedBatcher(BatchPolicy(max_batch=16, wait=10), threading.Lock())
    started = time.perf_counter()
    batcher.embed(FakeEncoder(), _colour(1), decode=lambda: None)
    assert time.perf_counter() - started < 2


def _decoding_for(seconds: float, started: threading.Event) -> Callable[[], None]:
    def decode() -> None:
        started.set()
        time.sleep(seconds)

    return decode


@pytest.mark.parametrize(("decode_s", "wait", "passes"), [(0.3, 5.0, [2]), (1.5, 0.1, [1, 1])])
def test_a_leader_waits_for_an_image_being_decoded_at_most_the_wait(decode_s, wait, passes):
    """Slow decoding joins the batch within the wait; past it, the leader goes alone (wait + a margin)."""
    encoder = FakeEncoder()
    batcher = EmbedBatcher(BatchPolicy(max_batch=16, wait=wait), threading.Lock())
    decoding = threading.Event()
    slow = threading.Thread(target=batcher.embed, args=(encoder, _colour(1), _decoding_for(decode_s, decoding)))
    slow.start()
    decoding.wait(5)
    started = time.perf_counter()
    batcher.embed(encoder, _colour(2), decode=lambda: None)
    took = time.perf_counter() - started
    slow.join(10)
    assert [len(images) for images in encoder.passes] == passes
    assert took < min(decode_s, wait) + 1


def test_an_image_the_model_refuses_fails_only_its_own_call():
    encoder = FakeEncoder(delay=0.02)
    batcher = EmbedBatcher(BatchPolicy(max_batch=16, wait=0.5), threading.Lock())
    images = [_colour(i, width=REFUSED_WIDTH if i == 2 else 8) for i in range(5)]
    results = _together([lambda image=image: batcher.embed(encoder, image) for image in images])
    assert isinstance(results[2], UserError) and "refuses" in str(results[2])
    for i in (0, 1, 3, 4):
        np.testing.assert_allclose(results[i], FakeEncoder().embed_images([images[i]]), atol=1e-6)
    assert any(len(images) > 1 for images in encoder.passes)  # the batched pass ran, failed, and fell back


def test_two_encoders_never_share_a_pass():
    """As during a reload: requests holding the old and the new model arrive together."""
    old, new = FakeEncoder(), FakeEncoder(sign=-1.0)
    batcher = EmbedBatcher(BatchPolicy(max_batch=16, wait=0.3), threading.Lock())
    encoders = [old if i % 2 else new for i in range(8)]
    images = [_colour(i) for i in range(8)]
    results = _together(
        [lambda e=e, image=image: batcher.embed(e, image) for e, image in zip(encoders, images, strict=True)]
    )
    assert {id(image) for p in old.passes for image in p} == {id(images[i]) for i in range(1, 8, 2)}
    assert {id(image) for p in new.passes for image in p} == {id(images[i]) for i in range(0, 8, 2)}
    for encoder, image, result in zip(encoders, images, results, strict=True):
        np.testing.assert_allclose(result, FakeEncoder(sign=encoder.sign).embed_images([image]), atol=1e-6)


@pytest.mark.parametrize(("max_batch", "wait"), [(0, 0.002), (16, -0.001)])
def test_a_policy_out_of_range_is_a_user_error(max_batch, wait):
    with pytest.raises(UserError, match="--max-batch must be >= 1 and --batch-wait-ms >= 0"):
        BatchPolicy(max_batch=max_batch, wait=wait)


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _counting(app, monkeypatch) -> list[int]:
    """Record the size of every forward pass of the app's model."""
    encoder = app.state.searcher.live.current().encoder
    embed, sizes = encoder.embed_images, []

    def counted(images: Sequence[Image.Image]) -> np.ndarray:
        sizes.append(len(images))
        if any(image.width == REFUSED_WIDTH for image in images):
            raise UserError("this model refuses images 7 pixels wide")
        return embed(images)

    monkeypatch.setattr(encoder, "embed_images", counted)
    return sizes


def _upload(url: str, body: bytes) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=60) as client:
        return client.post("/search", files={"image": ("q.png", body, "image/png")}, data={"k": "4"})


def _uploads(app, url: str, bodies: list[bytes], gathered: int) -> list[httpx.Response]:
    """All at once, one client each, with the model held until `gathered` images wait in one batch."""
    searcher = app.state.searcher
    with ThreadPoolExecutor(len(bodies)) as pool:
        with searcher._model_lock:
            answers = [pool.submit(_upload, url, body) for body in bodies]
            deadline = time.monotonic() + 30
            while sum(len(batch.images) for batch in searcher.embedding._open) < gathered:
                assert time.monotonic() < deadline, "the uploads did not gather"
                time.sleep(0.01)
        return [answer.result() for answer in answers]


def test_concurrent_uploads_take_fewer_passes_and_answer_as_unbatched(gallery, serve_limits, serving, monkeypatch):
    bodies = [path.read_bytes() for path in gallery.paths[:6]]
    batched = create_app(gallery.index_dir, device="cpu", limits=serve_limits, batching=BatchPolicy(16, wait=0.5))
    sizes = _counting(batched, monkeypatch)
    with serving(batched) as url:
        answers = _uploads(batched, url, bodies, gathered=len(bodies))
    alone = create_app(gallery.index_dir, device="cpu", limits=serve_limits, batching=BatchPolicy(max_batch=1))
    with serving(alone) as url:
        references = [_upload(url, body) for body in bodies]  # one at a time
    assert sizes == [len(bodies)]
    for answer, reference in zip(answers, references, strict=True):
        assert answer.status_code == reference.status_code == 200
        got, want = answer.json()["results"], reference.json()["results"]
        assert [r["id"] for r in got] == [r["id"] for r in want]
        np.testing.assert_allclose([r["score"] for r in got], [r["score"] for r in want], atol=1e-5)


def test_a_bad_upload_among_good_ones_fails_alone(gallery, serve_limits, serving, monkeypatch):
    """A file that does not decode is refused before batching; an image the model refuses, after the batch fails."""
    good = [path.read_bytes() for path in gallery.paths[:3]]
    truncated, refused = good[0][: len(good[0]) // 2], _png(_colour(3, width=REFUSED_WIDTH))
    app = create_app(gallery.index_dir, device="cpu", limits=serve_limits, batching=BatchPolicy(16, wait=0.5))
    sizes = _counting(app, monkeypatch)
    with serving(app) as url:
        answers = _uploads(app, url, [good[0], truncated, good[1], refused, good[2]], gathered=4)
    assert [answer.status_code for answer in answers] == [200, 400, 200, 400, 200]
    assert "cannot decode the image" in answers[1].json()["error"]
    assert "refuses images 7 pixels wide" in answers[3].json()["error"]
    for answer, i in zip((answers[0], answers[2], answers[4]), range(3), strict=True):
        assert answer.json()["results"][0]["id"] == gallery.ids[i]
    assert sizes == [4, 1, 1, 1, 1]  # the good images and the refused one met in one pass, which failed and fell back
