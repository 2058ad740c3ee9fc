"""`EmbedBatcher`: the image queries that arrive together are embedded in one forward pass.

A forward pass over 16 images costs far less than 16 passes over one, so concurrent uploads wait
a moment for each other. The first request to find no open batch for its encoder leads one: it
waits until the batch holds `max_batch` images or `wait` seconds have passed, then for the model,
and closes the batch only once it holds the model, so the requests that arrive while another
batch runs join the next one. Every other request waits for its leader's pass and takes its own
row. Batches are per encoder object: a request holds the encoder of the index version it started
with, so a reload in between never mixes two models in one pass. Images arrive decoded (a bad
file never reaches a batch); if a batched pass raises anyway, each image is embedded alone, so one
image the model refuses fails only its own request.
"""

from __future__ import annotations

import logging
import threading
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
        self.results: list[np.ndarray | Exception] = []
        self.full = threading.Event()  # the leader stops waiting for more
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
    """Embeds one decoded image per call, gathering concurrent calls into batches (see the module docstring).

    Args:
        policy: the batch size and wait bounds.
        model_lock: held around every forward pass (the model runs one pass at a time).
    """

    def __init__(self, policy: BatchPolicy, model_lock: threading.Lock) -> None:
        self.policy = policy
        self._model_lock = model_lock
        self._lock = threading.Lock()  # guards the open batches
        self._open: list[_Batch] = []  # at most one per encoder

    def embed(self, encoder: Encoder, image: Image.Image) -> np.ndarray:
        """`(1, D)` embedding of `image` by `encoder`; blocks until its batch has run.

        Raises:
            Exception: whatever `encoder.embed_images([image])` raises for this image alone.
        """
        if self.policy.max_batch == 1:
            with self._model_lock:
                return encoder.embed_images([image])
        batch, row, leads = self._join(encoder, image)
        if leads:
            batch.full.wait(self.policy.wait)
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

    def _join(self, encoder: Encoder, image: Image.Image) -> tuple[_Batch, int, bool]:
        """Add `image` to the open batch of `encoder`, or open one: `(batch, its row, whether this call leads)`."""
        with self._lock:
            batch = next((open_ for open_ in self._open if open_.encoder is encoder), None)
            leads = batch is None
            if batch is None:
                batch = _Batch(encoder)
                self._open.append(batch)
            batch.images.append(image)
            if len(batch.images) >= self.policy.max_batch:
                self._open.remove(batch)  # full: the next request opens another
                batch.full.set()
            return batch, len(batch.images) - 1, leads

    def _close(self, batch: _Batch) -> None:
        """No image joins `batch` after this (it may be closed already, by filling up)."""
        with self._lock:
            self._open = [open_ for open_ in self._open if open_ is not batch]
