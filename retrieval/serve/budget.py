"""`DecodeBudget`: how many bytes of decoded pixels all requests together may hold at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["DecodeBudget", "ServerBusy"]


class ServerBusy(Exception):
    """The budget stayed full for the whole wait; the caller answers 503 with Retry-After."""


class DecodeBudget:
    """A weighted semaphore over bytes: each image holds its estimated peak from decode to embedding.

    A limit per request (the pixel cap) does not bound the total: eight uploads of a 36-megapixel
    image decode at once. Weighing by bytes lets many small images run side by side while large
    ones queue. A request waits at most `wait` seconds for room, then gives up (`ServerBusy`)
    rather than queueing without bound. Not first-come-first-served: a small image may pass a
    large one that is waiting.

    Args:
        capacity: bytes of decoded pixels in flight, in all.
        wait: seconds a request waits for room.
    """

    def __init__(self, capacity: int, wait: float) -> None:
        if capacity <= 0 or wait < 0:
            raise ValueError(f"capacity must be > 0 and wait >= 0, got {capacity} and {wait}")
        self.capacity = capacity
        self.wait = wait
        self._free = capacity
        self._changed = threading.Condition()

    @property
    def free(self) -> int:
        """Bytes not held right now."""
        return self._free

    @contextmanager
    def hold(self, size: int) -> Iterator[None]:
        """Hold `size` bytes (at most `capacity`) for the `with` block.

        Raises:
            ServerBusy: no room within `wait` seconds.
        """
        size = min(size, self.capacity)
        with self._changed:
            if not self._changed.wait_for(lambda: self._free >= size, timeout=self.wait):
                raise ServerBusy("the server is busy decoding other images; retry in a second")
            self._free -= size
        try:
            yield
        finally:
            with self._changed:
                self._free += size
                self._changed.notify_all()
