"""The copy check of leaks: which images are re-encoded, resized, slightly cropped or recoloured copies of another.

A trained embedding answers "same class", not "same photo": on category data (Fashion-MNIST)
a resized or cropped copy's source ranks about 100th among its neighbours, behind other images of
its class (docs/audit.md), so no rule over the embedding's graph separates copies. A copy keeps
the picture, though: each image's grey thumbnail (`SIZE` x `SIZE`, mean removed, unit length:
blind to JPEG noise, resizing and brightness or contrast) is compared with every other image's
thumbnail and with the thumbnails of its 25 `CROP` crops (five positions on each axis), so a
small crop of an image still finds it. The kNN graph of these descriptors (FAISS, like the
embedding's) is what `leaks.find_leaks` reads; the sizes were chosen on a validation half of the
planted set. Images showing the same picture (`picture_ids`: bit-identical thumbnails, or identical
bytes where the thumbnail is flat) are one entry of the graph (`one_per_picture`), so a picture held
several times never stands as its own look-alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from retrieval.audit.knn_graph import KnnGraph, index_for
from retrieval.images import UnreadableImage, load_image
from retrieval.runtime.files import file_sha256

__all__ = ["CROP", "SIZE", "CopyDescriptors", "copy_descriptors", "copy_graph", "one_per_picture", "picture_ids"]

SIZE = 8  # thumbnail side: 12 and 16 ranked the planted copies worse on the validation half (more shift-sensitive)
CROP = 0.9  # side of the crops, as a share of the image's: copies cropped by up to a tenth still match one
# Crop positions per axis, evenly from edge to edge: a crop is then at most 1/80 of the side off one. Three (edges and
# centre) found 15 of the validation half's 23 planted crops, five all of them.
_POSITIONS = 5
_BLOCK = 8192  # query rows per FAISS call: a bounded (block, width) result buffer


@dataclass(frozen=True)
class CopyDescriptors:
    """Per readable image its full thumbnail (`queries`), and every thumbnail with the row it comes from."""

    rows: np.ndarray  # (R,) int64 catalogue rows that could be read, ascending
    queries: np.ndarray  # (R, SIZE^2) float32 unit vectors: the whole image's thumbnail
    database: np.ndarray  # (M, SIZE^2) float32: each readable image's thumbnail and its crops' thumbnails
    owner: np.ndarray  # (M,) int64 the catalogue row of each database descriptor


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


def copy_descriptors(paths: list[Path], progress: bool = True) -> CopyDescriptors:
    """The descriptors of every readable image (an unreadable one is nobody's copy).

    Written into arrays sized for every image up front (pages never written cost no memory): a list of one
    small array per descriptor peaked at 2.6x the bytes (241 against 92 MiB for 20,000 images).
    """
    dim, most = SIZE * SIZE, 1 + _POSITIONS**2
    rows = np.empty(len(paths), dtype=np.int64)
    queries = np.empty((len(paths), dim), dtype=np.float32)
    database = np.empty((len(paths) * most, dim), dtype=np.float32)
    owner = np.empty(len(paths) * most, dtype=np.int64)
    readable = stored = 0
    for row, path in enumerate(tqdm(paths, desc="copy check", unit="image", disable=None if progress else True)):
        try:
            image = load_image(path, "L")
        except UnreadableImage:
            continue
        described = [_thumbnail(image), *(_thumbnail(crop) for crop in _crops(image))]  # fewer crops on a tiny image
        rows[readable], queries[readable] = row, described[0]
        database[stored : stored + len(described)] = described
        owner[stored : stored + len(described)] = row
        readable, stored = readable + 1, stored + len(described)
    return CopyDescriptors(rows[:readable], queries[:readable], database[:stored], owner[:stored])


def picture_ids(descriptors: CopyDescriptors, paths: list[Path]) -> np.ndarray:
    """`(N,)` int64 the picture each of the catalogue's rows shows, numbered in row order; -1 for an unreadable one.

    Rows share a picture when their thumbnails are bit-identical (identical files always are); a flat
    thumbnail (the zero vector: one colour) says nothing, so flat images share one only with identical bytes.
    """
    ids = np.full(len(paths), -1, dtype=np.int64)
    seen: dict[bytes, int] = {}
    for row, thumbnail in zip(descriptors.rows.tolist(), descriptors.queries, strict=True):
        key = b"t" + thumbnail.tobytes() if thumbnail.any() else b"f" + _file_key(paths[row], row)
        ids[row] = seen.setdefault(key, len(seen))
    return ids


def _file_key(path: Path, row: int) -> bytes:
    """A flat image's key: its bytes' sha256 (a file that vanished since it was read: its row, a key of its own)."""
    try:
        return file_sha256(path).encode()
    except OSError:
        return f"row {row}".encode()


def one_per_picture(descriptors: CopyDescriptors, pictures: np.ndarray) -> CopyDescriptors:
    """The descriptors of each picture's first row only (`pictures` from `picture_ids`): the graph's entries."""
    _, first = np.unique(pictures[descriptors.rows], return_index=True)
    if len(first) == len(descriptors.rows):  # no picture twice: nothing to copy
        return descriptors
    first = np.sort(first)
    held = np.isin(descriptors.owner, descriptors.rows[first])
    return CopyDescriptors(
        descriptors.rows[first], descriptors.queries[first], descriptors.database[held], descriptors.owner[held]
    )


def copy_graph(descriptors: CopyDescriptors, n: int, k: int) -> KnnGraph:
    """Each of `n` catalogue rows' k most similar other images by descriptor (best of their crops).

    Rows without a descriptor, or with fewer than k others found, are padded with neighbour -1, score -1.
    """
    neighbours = np.full((n, k), -1, dtype=np.int64)
    scores = np.full((n, k), -1.0, dtype=np.float32)
    if len(descriptors.rows) < 2:
        return KnnGraph(neighbours, scores, exact=True)
    index, exact = index_for(descriptors.database)
    # Room for k + 1 images' every descriptor: the row's own and its neighbours' crops crowd the list.
    width = min(len(descriptors.database), (1 + _POSITIONS**2) * (k + 1))
    for start in range(0, len(descriptors.rows), _BLOCK):
        block = slice(start, start + _BLOCK)
        found_scores, found = index.search(descriptors.queries[block], width)
        for row, hits, row_scores in zip(descriptors.rows[block], found, found_scores, strict=True):
            owners = descriptors.owner[hits[hits >= 0]]
            row_scores = row_scores[hits >= 0]
            keep = owners != row
            owners, row_scores = owners[keep], row_scores[keep]
            _, first = np.unique(owners, return_index=True)  # each image's first hit is its best descriptor
            best = np.sort(first)[:k]
            neighbours[row, : len(best)] = owners[best]
            scores[row, : len(best)] = row_scores[best]
    return KnnGraph(neighbours, scores, exact)
