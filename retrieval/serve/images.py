"""Untrusted image bytes -> a decoded PIL image within pixel limits, and bounded thumbnails."""

from __future__ import annotations

import io

from PIL import Image, UnidentifiedImageError

from retrieval.data.csv_dataset import IMAGE_ERRORS, image_error_reason
from retrieval.errors import UserError

__all__ = ["ALLOWED_FORMATS", "ImageTooLarge", "decode_image", "thumbnail"]

# Formats a search page can upload; Pillow's rarer decoders stay out of reach of a request.
ALLOWED_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")


class ImageTooLarge(UserError):
    """The image declares more pixels than allowed (a decompression bomb, or just too big)."""


def decode_image(data: bytes, max_pixels: int, draft_size: int | None = None) -> Image.Image:
    """Decode `data` fully, refusing images over `max_pixels` before any pixel is decompressed.

    Args:
        data: the encoded file.
        max_pixels: largest width x height accepted; the header is checked before decoding.
        draft_size: let JPEG decode at a reduced scale that still covers this many pixels a side
            (thumbnails), which is several times faster for large photos.

    Raises:
        ImageTooLarge: more than `max_pixels` pixels.
        UserError: not an image in one of `ALLOWED_FORMATS`, or truncated / corrupt.
    """
    try:
        image = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except Image.DecompressionBombError as exc:
        raise ImageTooLarge(f"image too large: {exc}") from exc
    except UnidentifiedImageError as exc:
        allowed = ", ".join(ALLOWED_FORMATS)
        raise UserError(f"not an image this server reads ({allowed})") from exc
    if image.width * image.height > max_pixels:
        raise ImageTooLarge(f"image too large: {image.width}x{image.height} pixels, the limit is {max_pixels}")
    if draft_size is not None:
        image.draft("RGB", (draft_size, draft_size))
    try:
        image.load()
    except IMAGE_ERRORS as exc:
        raise UserError(f"cannot decode the image ({image_error_reason(exc)}); is the file truncated?") from exc
    return image


def thumbnail(data: bytes, size: int, max_pixels: int) -> tuple[bytes, str]:
    """A thumbnail at most `size` pixels a side: `(encoded bytes, media type)`.

    JPEG (quality 85) for opaque images, PNG when the image has transparency.
    """
    image = decode_image(data, max_pixels, draft_size=size)
    image.thumbnail((size, size))
    transparent = image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)
    buffer = io.BytesIO()
    if transparent:
        image.convert("RGBA").save(buffer, "PNG", optimize=True)
        return buffer.getvalue(), "image/png"
    image.convert("RGB").save(buffer, "JPEG", quality=85)
    return buffer.getvalue(), "image/jpeg"
