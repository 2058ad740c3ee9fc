"""The copy check's descriptors: what makes an image a re-encoded, resized, slightly cropped or recoloured copy.

A trained embedding answers "same class", not "same photo": on category data (Fashion-MNIST)
a resized or cropped copy's source ranks about 100th among its neighbours, behind other images of
its class (docs/audit.md), so no rule over the embedding's graph separates copies. A copy keeps
the picture, though: each image's grey thumbnail (`SIZE` x `SIZE`, mean removed, unit length:
blind to JPEG noise, resizing and brightness or contrast) is compared with every other image's
thumbnail and with the thumbnails of its 25 `CROP` crops (five positions on each axis), so a
small crop of an image still finds it. The kNN graph of these descriptors (`copy_index.copy_graph`)
is what `leaks.find_leaks` reads; the sizes were chosen on a validation half of the planted set.
Images showing the same picture (the same `Described.key`: bit-identical thumbnails, or identical
bytes where the thumbnail is flat) are one entry of the graph, so a picture held several times never
stands as its own look-alike.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from retrieval.images import UnreadableImage, load_image
from retrieval.runtime.files import file_sha256

__all__ = ["CROP", "DESCRIPTORS_PER_IMAGE", "SIZE", "Described", "describe_images", "picture_key"]

SIZE = 8  # thumbnail side: 12 and 16 ranked the planted copies worse on the validation half (more shift-sensitive)
CROP = 0.9  # side of the crops, as a share of the image's: copies cropped by up to a tenth still match one
# Crop positions per axis, evenly from edge to edge: a crop is then at most 1/80 of the side off one. Three (edges and
# centre) found 15 of the validation half's 23 planted crops, five all of them.
_POSITIONS = 5
DESCRIPTORS_PER_IMAGE = 1 + _POSITIONS**2  # the most: a tiny image has fewer distinct crops


@dataclass(frozen=True)
class Described:
    """One readable image's descriptors and the picture it shows."""

    descriptors: np.ndarray  # (1 + crops, SIZE^2) float32 unit vectors (or zero): the whole thumbnail, then its crops'
    key: bytes  # images of one key show one picture (`picture_key`)


def describe_images(paths: list[Path], progress: bool = True) -> Iterator[Described | None]:
    """Each image's descriptors in row order, None for an unreadable one (nobody's copy): read one image at a time,
    so the caller decides what to keep (`copy_index.copy_index` stores each picture's once)."""
    for row, path in enumerate(tqdm(paths, desc="copy check", unit="image", disable=None if progress else True)):
        try:
            image = load_image(path, "L")
        except UnreadableImage:
            yield None
            continue
        described = np.stack([_thumbnail(image), *(_thumbnail(crop) for crop in _crops(image))])
        yield Described(described, picture_key(described[0], functools.partial(_file_key, path, row)))


def picture_key(thumbnail: np.ndarray, file_key: Callable[[], bytes]) -> bytes:
    """The key of the picture a thumbnail shows: the sha256 of its bits (32 bytes a picture to remember, not 256),
    or for a flat thumbnail (the zero vector: one colour, which says nothing) `file_key()`, called only then."""
    if thumbnail.any():
        return b"t" + hashlib.sha256(np.ascontiguousarray(thumbnail, dtype=np.float32).tobytes()).digest()
    return b"f" + file_key()


def _thumbnail(image: Image.Image) -> np.ndarray:
    pixels = np.asarray(image.resize((SIZE, SIZE), Image.Resampling.BILINEAR), dtype=np.float32).ravel()
    pixels = pixels - pixels.mean()
    norm = float(np.linalg.norm(pixels))
    return pixels / norm if norm > 1e-6 else pixels  # a flat image: the zero vector, a copy of nothing


def _crops(image: Image.Image) -> list[Image.Image]:
    width, height = image.size
    crop_width, crop_height = max(1, round(width * CROP)), max(1, round(height * CROP))
    steps = range(_POSITIONS)
    lefts = sorted({round(step * (width - crop_width) / (_POSITIONS - 1)) for step in steps})
    tops = sorted({round(step * (height - crop_height) / (_POSITIONS - 1)) for step in steps})
    return [image.crop((x, y, x + crop_width, y + crop_height)) for x in lefts for y in tops]


def _file_key(path: Path, row: int) -> bytes:
    """A flat image's key: its bytes' sha256 (a file that vanished since it was read: its row, a key of its own)."""
    try:
        return file_sha256(path).encode()
    except OSError:
        return f"row {row}".encode()
