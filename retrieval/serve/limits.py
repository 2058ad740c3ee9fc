"""`ServeLimits`: what one request, and all requests together, may cost the service."""

from __future__ import annotations

from dataclasses import dataclass

from retrieval.errors import UserError
from retrieval.serve.uploads import BYTES_PER_PIXEL

__all__ = ["ServeLimits"]


@dataclass(frozen=True)
class ServeLimits:
    """What a request may cost; anything over a limit is a 4xx (or a 503 to retry), never a crash."""

    max_upload_bytes: int = 16 * 2**20  # request body (an uploaded image or a JSON vector)
    max_pixels: int = 40_000_000  # decoded image size (8k x 5k); larger ones are decompression bombs
    max_file_bytes: int = 64 * 2**20  # an indexed image file read for a thumbnail
    thumb_size: int = 256  # thumbnail longest side in pixels
    thumb_cache: int = 4096  # thumbnails kept in memory (a few MB at ~10 KB each)
    # Decoded pixels of all requests at once, estimated at BYTES_PER_PIXEL each: the default holds one image at
    # the pixel cap (800 MB) or about five 12-megapixel photos; beyond it a request waits, then gets a 503.
    decode_memory: int = 2**30
    decode_wait: float = 1.0  # seconds a request waits for decode memory before its 503
    body_timeout: float = 30.0  # seconds a request body may take to arrive (a stalled client gets a 408)

    def check(self) -> None:
        """Raise `UserError` for limits that contradict each other."""
        one_image = self.max_pixels * BYTES_PER_PIXEL
        if self.decode_memory < one_image:
            raise UserError(
                f"decode memory {self.decode_memory:,} bytes is less than one image at the pixel cap "
                f"({self.max_pixels:,} pixels x {BYTES_PER_PIXEL} bytes = {one_image:,}); raise the decode memory "
                "or lower the pixel cap"
            )
        if self.decode_wait < 0 or self.body_timeout <= 0:
            raise UserError(
                f"decode wait must be >= 0 and body timeout > 0 seconds, got {self.decode_wait} and {self.body_timeout}"
            )
