"""Untrusted image bytes -> a PIL image within pixel limits, and bounded thumbnails.

Decoding is two steps so that a caller can reserve memory in between: `open_image` reads only
the header (and the metadata chunks before the pixels) and checks the pixel count; `load_pixels`
decompresses. `BYTES_PER_PIXEL` is what one image costs at its peak on the way to an embedding or
a thumbnail. The model's resize can make an image larger than it was: `center_crop` scales the
shorter side up, so a 1 x 400,000 PNG of a few hundred bytes becomes 36 x 14,400,000 pixels at a
32-pixel input. `preprocess_bytes` therefore holds the resized image to the same pixel cap and
counts it in the bytes a request reserves, before anything is decoded. Orientation and transparency
are the shared reader's (`flatten_image`), so the service sees an image exactly as training,
evaluation and `index build` do.
"""

from __future__ import annotations

import io
import re

from PIL import Image, UnidentifiedImageError

from retrieval.errors import UserError
from retrieval.images import IMAGE_ERRORS, flatten_image, image_error_reason

__all__ = [
    "ALLOWED_FORMATS",
    "BYTES_PER_PIXEL",
    "RESIZED_BYTES_PER_PIXEL",
    "ImageTooLarge",
    "load_pixels",
    "open_image",
    "preprocess_bytes",
    "thumbnail",
]

# Formats a search page can upload; Pillow's rarer decoders stay out of reach of a request.
ALLOWED_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
# Peak bytes per pixel of decoding one image and flattening it (Pillow keeps RGB in 4 bytes; an RGBA
# upload is composited onto a white RGBA copy, then converted): measured 13 for RGB, 17 for RGBA.
BYTES_PER_PIXEL = 20
# Peak bytes per pixel of the model's resize output (Pillow's RGB in 4 bytes, and the first of its two
# passes): measured 5.2 for Pillow and torchvision resizing 1 x 30,000 to 36 x 1,080,000.
RESIZED_BYTES_PER_PIXEL = 8


class ImageTooLarge(UserError):
    """The image declares more pixels than allowed (a decompression bomb, or just too big)."""


def open_image(data: bytes, max_pixels: int) -> Image.Image:
    """Open `data` lazily: the header is read and checked, no pixel is decompressed yet.

    Raises:
        ImageTooLarge: more than `max_pixels` pixels.
        UserError: not an image in one of `ALLOWED_FORMATS`, or a header Pillow refuses (e.g. a
            zTXt or iCCP chunk that inflates past Pillow's limit on metadata chunks).
    """
    try:
        image = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except Image.DecompressionBombError as exc:  # past Pillow's own limit, checked before ours could be
        declared = re.search(r"\((\d+) pixels\)", str(exc))
        size = f"{int(declared[1]):,} pixels" if declared else "more pixels than Pillow opens"
        raise ImageTooLarge(_too_large(size, max_pixels)) from exc
    except UnidentifiedImageError as exc:
        allowed = ", ".join(ALLOWED_FORMATS)
        raise UserError(f"not an image this server reads ({allowed})") from exc
    except IMAGE_ERRORS as exc:
        raise UserError(f"cannot read the image header ({image_error_reason(exc)}); send a plain image") from exc
    if image.width * image.height > max_pixels:
        size = f"{image.width}x{image.height} pixels ({image.width * image.height:,})"
        raise ImageTooLarge(_too_large(size, max_pixels))
    return image


def preprocess_bytes(image: Image.Image, resized: tuple[int, int], max_pixels: int) -> int:
    """Bytes an image from `open_image` holds at its peak on the way to the model, whose resize gives it `resized`.

    Args:
        image: the opened image (its header only is read).
        resized: `(width, height)` of the model's resize of it (`Encoder.resized_size`), before the crop or pad.
        max_pixels: the pixel cap, which the resized image is held to as the decoded one is.

    Raises:
        ImageTooLarge: the resized image has more than `max_pixels` pixels (an elongated image that a
            shorter-side resize scales up).
        UserError: the resize gives a side of 0 pixels (an image more elongated than the model's input side).
    """
    width, height = image.size
    ratio = max(width, height) / min(width, height)
    pixels = resized[0] * resized[1]
    if pixels > max_pixels:
        most = max(1, max_pixels // min(resized) ** 2)  # a shorter-side resize gives (side x side·ratio) pixels
        raise ImageTooLarge(
            f"image too large for this model: {width}x{height} pixels (aspect ratio {ratio:,.0f}:1) resize to "
            f"{resized[0]}x{resized[1]} ({pixels:,}) before the model's crop; this server takes up to "
            f"{max_pixels:,} pixels (retrieval serve --max-pixels {max_pixels}): send an image of aspect ratio "
            f"at most {most:,}:1"
        )
    if min(resized) < 1:
        raise UserError(
            f"image too thin for this model: {width}x{height} pixels (aspect ratio {ratio:,.0f}:1) resize to "
            f"{resized[0]}x{resized[1]}; send an image of aspect ratio at most {max(resized)}:1"
        )
    return width * height * BYTES_PER_PIXEL + pixels * RESIZED_BYTES_PER_PIXEL


def _too_large(size: str, max_pixels: int) -> str:
    """The refusal of an image of `size`: the server's limit, and how its operator raises it."""
    return (
        f"image too large: {size}; this server takes up to {max_pixels:,} pixels (retrieval serve --max-pixels "
        f"{max_pixels}): send a smaller image, or restart the server with a larger --max-pixels"
    )


def load_pixels(image: Image.Image, draft_size: int | None = None) -> None:
    """Decompress an image from `open_image` in place.

    Args:
        image: what `open_image` returned.
        draft_size: let JPEG decode at a reduced scale that still covers this many pixels a side
            (thumbnails), which is several times faster for large photos.

    Raises:
        UserError: truncated or corrupt data.
    """
    if draft_size is not None:
        image.draft("RGB", (draft_size, draft_size))
    try:
        image.load()
    except IMAGE_ERRORS as exc:
        raise UserError(f"cannot decode the image ({image_error_reason(exc)}); is the file truncated?") from exc


def thumbnail(image: Image.Image, size: int) -> tuple[bytes, str]:
    """A JPEG (quality 85) at most `size` pixels a side of a decoded image: `(encoded bytes, media type)`.

    The image is read as the model reads it (`flatten_image`: upright by its EXIF orientation,
    transparency on white), so a thumbnail shows what was embedded.
    """
    upright = flatten_image(image)
    upright.thumbnail((size, size))
    buffer = io.BytesIO()
    upright.save(buffer, "JPEG", quality=85)
    return buffer.getvalue(), "image/jpeg"
