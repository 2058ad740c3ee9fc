"""Reading images as every stage sees them: upright, `RGB` or `L`, transparency on white; and their background.

`load_image` is the one way an image file is read (training, evaluation, embedding, indexing,
the ONNX runtime), and `IMAGE_ERRORS` the one list of exceptions that mean "this file is not a
readable image". It and `flatten_image` (the path of an already-decoded image: `serve`'s uploads)
turn an image upright by its EXIF orientation first (`upright_image`), so a phone photo stored
sideways trains, embeds and is searched as it is seen. `border_colour` (an image's own background,
`augment.fill: auto`) and `fill_value` (a named one) are the colours that padding fills with.

Only Pillow and numpy: a deployment that embeds with onnxruntime reads images here without torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import ExifTags, Image, ImageOps

from retrieval.errors import UserError

__all__ = [
    "IMAGE_ERRORS",
    "Fill",
    "UnreadableImage",
    "border_colour",
    "fill_value",
    "flatten_image",
    "image_error_reason",
    "load_image",
    "upright_image",
]

# A background colour as 8-bit pixel values: one gray level, or red, green, blue.
Fill = int | tuple[int, int, int]

# Modes that `load_image` keeps grayscale; every other mode becomes RGB.
_GRAY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "F")
_SIXTEEN_BIT = ("I;16", "I;16L", "I;16B")
# What Pillow raises for a missing file (OSError), a file that is not an image (UnidentifiedImageError, an
# OSError), a truncated one (OSError, SyntaxError, ValueError), or a decompression bomb.
IMAGE_ERRORS: tuple[type[Exception], ...] = (OSError, SyntaxError, ValueError, Image.DecompressionBombError)


class UnreadableImage(UserError):
    """An image file that cannot be read: `cannot read image PATH: REASON; replace or remove the file`."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"cannot read image {path}: {reason}; replace or remove the file")
        self.path = str(path)
        self.reason = reason  # e.g. "UnidentifiedImageError: cannot identify image file ..."

    def __reduce__(self) -> tuple[type[UnreadableImage], tuple[str, str]]:
        return type(self), (self.path, self.reason)


def image_error_reason(exc: BaseException) -> str:
    """A one-line reason for one of `IMAGE_ERRORS`, e.g. `UnidentifiedImageError: cannot identify image file ...`."""
    message = str(exc).splitlines()[0][:160] if str(exc) else ""
    return f"{exc.__class__.__name__}: {message}" if message else exc.__class__.__name__


def load_image(path: str | Path, mode: str | None = None) -> Image.Image:
    """Read an image file upright (EXIF orientation applied) as `RGB` or `L`, transparency on white (`flatten_image`).

    Raises:
        UnreadableImage: the file is missing or cannot be decoded as an image.
    """
    try:
        with Image.open(path) as image:
            return flatten_image(image, mode)
    except IMAGE_ERRORS as exc:
        raise UnreadableImage(path, image_error_reason(exc)) from exc


def upright_image(image: Image.Image) -> Image.Image:
    """The image turned as its EXIF orientation says it is seen (`ImageOps.exif_transpose`).

    Cameras and phones often store the pixels sideways and record the turn in the EXIF
    Orientation tag; every viewer applies it, so the model must too. An image without one
    (orientation 1 or none) is returned as it is, without the copy `exif_transpose` would make.
    """
    if image.getexif().get(ExifTags.Base.Orientation, 1) == 1:
        return image
    return ImageOps.exif_transpose(image)


def flatten_image(image: Image.Image, mode: str | None = None) -> Image.Image:
    """An opened image, turned upright (`upright_image`), as `RGB` or `L` with transparent pixels composited onto white.

    A black stroke on a transparent background (RGBA, LA, or a palette / grayscale / RGB PNG with a
    transparent colour) stays a black stroke on white; a plain conversion would drop the alpha and
    leave the stroke on black. 16-bit grayscale is scaled to 8 bits (Pillow would clip it).

    Args:
        image: a decoded (or lazily opened) Pillow image.
        mode: `RGB` or `L`; None keeps grayscale images `L` and makes all others `RGB` (the
            transforms then convert to the channels the model takes).
    """
    image = upright_image(image)
    target = mode or ("L" if image.mode in _GRAY_MODES else "RGB")
    if image.mode in _SIXTEEN_BIT:
        image = image.point(lambda value: value / 257)
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info:
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, image.convert("RGBA"))
    return image.convert(target)


def border_colour(image: Image.Image) -> Fill:
    """The median colour of an image's one-pixel border: its background (`fill: auto`).

    Example:
        >>> page = Image.new("L", (8, 8), 230)
        >>> page.putpixel((4, 4), 0)
        >>> border_colour(page), border_colour(Image.new("RGB", (4, 4), (10, 20, 30)))
        (230, (10, 20, 30))
    """
    pixels = np.asarray(image)
    ring = np.concatenate([pixels[0], pixels[-1], pixels[1:-1, 0], pixels[1:-1, -1]])
    colour = np.median(ring, axis=0).round().astype(int)
    if colour.ndim == 0:
        return int(colour)
    red, green, blue = (int(value) for value in colour[:3])
    return red, green, blue


def fill_value(fill: str, mean: tuple[float, ...]) -> Fill:
    """A configured `augment.fill` (`white`, `black`, `mean`; not `auto`) as 8-bit pixel values of `mean`'s channels.

    Example:
        >>> fill_value("white", (0.5,)), fill_value("mean", (0.485, 0.456, 0.406))
        (255, (124, 116, 104))
    """
    if fill == "white":
        return 255
    if fill == "black":
        return 0
    if len(mean) == 1:
        return round(255 * mean[0])
    red, green, blue = (round(255 * m) for m in mean)
    return red, green, blue
