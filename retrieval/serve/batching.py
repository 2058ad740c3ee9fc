"""`EmbedBatcher`: the image queries that arrive together are embedded in one forward pass.

A forward pass over many images costs far less than as many passes over one, so concurrent
uploads wait a moment for each other. The first request to find no open batch for its encoder
leads one: while other images are still being decoded it waits for them, until the batch holds
`max_batch` images or `wait` seconds have passed; a request with no other on its way does not wait
at all (on a busy machine even a short sleep costs a scheduler wake-up). Then the leader waits for
the model and closes the batch only once it holds it, so the requests that arrive while another
batch runs join the next one. Every other request waits for its leader's pass and takes its own
row. Batches are per encoder object: a request holds the encoder of the index version it started
with, so a reload in between never mixes two models in one pass. Images are decoded before they
join (a broken file never reaches a batch); if a batched pass raises anyway, each image is
embedded alone, so one image the model refuses fails only its own request.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from PIL import Image

from retrieval.errors import UserError
from retrieval.inference.interface import Encoder

__all__ = ["BatchPolicy", "EmbedBatcher"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchPolicy:
    """How many image queries one forward pass may take, and how long the first of them waits for the rest.

    `max_batch=1` embeds every request alone, at once (no batching).

    Raises:
        UserError: a batch size under 1 or a negative wait.
    """

    max_batch: int = 16
    wait: float = 0.002  # seconds

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.wait < 0:
            raise UserError(
                f"--max-batch must be >= 1 and --batch-wait-ms >= 0, got {self.max_batch} and {self.wait * 1000:g}"
            )


class _Batch:
    """Images gathered for one encoder, and, once its pass has run, each one's embedding or error."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.images: list[Image.Image] = []
        self.closed = False  # no image joins any more (full, or its pass is about to run)
        self.results: list[np.ndarray | Exception] = []
        self.done = threading.Event()  # results are ready

    def run(self) -> None:
        """Embed the images in one pass; if it raises, embed each alone so that only the bad one fails."""
        try:
            embeddings = self.encoder.embed_images(self.images)
            self.results = [embeddings[row : row + 1] for row in range(len(self.images))]
        except Exception as exc:
            if len(self.images) == 1:
                self.results = [exc]
                return
            _log.warning("a batch of %d images failed (%r); embedding them one by one", len(self.images), exc)
            self.results = [self._alone(image) for image in self.images]

    def _alone(self, image: Image.Image) -> np.ndarray | Exception:
        try:
            return self.encoder.embed_images([image])
        except Exception as exc:
            return exc


class EmbedBatcher:
    """Embeds one image per call, gathering concurrent calls into batches (see the module docstring).

    Args:
        policy: the batch size and wait bounds.
        model_lock: held around every forward pass (the model runs one pass at a time).
    """

    def __init__(self, policy: BatchPolicy, model_lock: threading.Lock) -> None:
        self.policy = policy
        self._model_lock = model_lock
        self._changed = threading.Condition()  # guards the open batches and the count of images on their way
        self._open: list[_Batch] = []  # at most one per encoder
        self._decoding = 0  # calls decoding their image: a leader waits for them

    def embed(self, encoder: Encoder, image: Image.Image, decode: Callable[[], object] | None = None) -> np.ndarray:
        """`(1, D)` embedding of `image` by `encoder`; blocks until its batch has run.

        Args:
            encoder: the model of the index version the request started with.
            image: the query image.
            decode: decompresses `image` before it joins a batch (a leader waits for images being decoded).

        Raises:
            Exception: whatever `decode()` raises, or `encoder.embed_images([image])` for this image alone.
        """
        if self.policy.max_batch == 1:
            if decode is not None:
                decode()
            with self._model_lock:
                return encoder.embed_images([image])
        if decode is not None:
            self._decode(decode)
        batch, row, leads = self._join(encoder, image, decoded=decode is not None)
        if leads:
            with self._changed:  # wait for the images being decoded, within the bounds
                self._changed.wait_for(lambda: batch.closed or not self._decoding, timeout=self.policy.wait)
            with self._model_lock:
                self._close(batch)
                try:
                    batch.run()
                finally:
                    batch.done.set()
        else:
            batch.done.wait()
        result = batch.results[row]
        if isinstance(result, Exception):
            raise result
        return result

    def _decode(self, decode: Callable[[], object]) -> None:
        """Run `decode`, counted as an image on its way until it joins a batch (`_join`) or fails."""
        with self._changed:
            self._decoding += 1
        try:
            decode()
        except BaseException:
            with self._changed:
                self._decoding -= 1
                self._changed.notify_all()
            raise

    def _join(self, encoder: Encoder, image: Image.Image, decoded: bool) -> tuple[_Batch, int, bool]:
        """Add `image` to the open batch of `encoder`, or open one: `(batch, its row, whether this call leads)`.

        `decoded`: the call was counted by `_decode`; it stops counting in the same step as it joins,
        so that a leader always sees it either on its way or in the batch.
        """
        with self._changed:
            if decoded:
                self._decoding -= 1
            batch = next((open_ for open_ in self._open if open_.encoder is encoder), None)
            leads = batch is None
            if batch is None:
                batch = _Batch(encoder)
                self._open.append(batch)
            batch.images.append(image)
            if len(batch.images) >= self.policy.max_batch:
                self._close(batch)  # full: the next request opens another
            self._changed.notify_all()
            return batch, len(batch.images) - 1, leads

    def _close(self, batch: _Batch) -> None:
        """No image joins `batch` after this (it may be closed already, by filling up)."""
        with self._changed:
            batch.closed = True
            self._open = [open_ for open_ in self._open if open_ is not batch]
