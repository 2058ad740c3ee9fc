"""Whether two images the copy check matched differ in colour: on colour catalogues a recoloured drawing is often
another item.

The copy check compares grey thumbnails (`retrieval.audit.copies`), blind to colour by design: a
recoloured photo is still a copy of it. But a blue document icon and a green spreadsheet icon of
one drawing are two items (issue 49: 4 of 12 leak rows of an icon set). So each leak pair is also
compared by colour, and its row says so: the hue histograms (`HUE_BINS` bins, each pixel weighted by
its saturation times its value, so white, grey and black pixels count for nothing; shared between its
two nearest bins, so a hue a few degrees off is no shift) of the cells of a `GRID` x `GRID` grid, and
the pair differs in colour when, cell by cell, at least `SHIFT` of the hue mass must move to turn one
into the other (half the L1 distance, averaged by mass), or when one image is coloured and the other
grey. Per cell, because a multicoloured picture whose hues are all rotated keeps its overall mix. Re-encoding,
resizing, cropping and brightness or contrast changes keep the hues; a recolouring moves them.
The leak stays a leak (the picture is the same); the user decides whether the colour makes another item.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from retrieval.audit.leaks import Leaks
from retrieval.images import UnreadableImage, load_image

__all__ = ["GRID", "HUE_BINS", "SHIFT", "colour_differs", "hue_grid", "recoloured_leaks"]

HUE_BINS = 12  # 30 degrees each: a recolouring moves the mass by one bin or more
GRID = 4  # cells per side: a multicoloured picture's hues, rotated, keep their overall mix but not their places
SHIFT = 0.5  # share of the hue mass that must move for two images to differ in colour
_COLOURED = 0.02  # mean pixel weight (saturation x value) above which an image has colour at all
_SIDE = 48  # pixels per side the image is resized to (GRID divides it)


def hue_grid(path: str | Path) -> np.ndarray | None:
    """`(GRID * GRID, HUE_BINS)` each cell's hue mass (pixel weights, not normalised); None for an unreadable image."""
    try:
        image = load_image(path, "RGB")
    except UnreadableImage:
        return None
    hsv = np.asarray(image.resize((_SIDE, _SIDE), Image.Resampling.BILINEAR).convert("HSV"), dtype=np.float64) / 255
    weight = hsv[..., 1] * hsv[..., 2]
    # Each pixel shared between the two nearest bin centres (hue is circular), so a hue a few degrees off moves a
    # few degrees' share of the mass, never a whole bin's.
    position = hsv[..., 0] * HUE_BINS - 0.5
    lower = np.floor(position)
    upper_share = position - lower
    lower_bin = lower.astype(np.int64) % HUE_BINS
    cell = (np.arange(_SIDE) * GRID // _SIDE)[:, None] * GRID + (np.arange(_SIDE) * GRID // _SIDE)[None, :]
    slots = GRID * GRID * HUE_BINS
    mass = np.bincount((cell * HUE_BINS + lower_bin).ravel(), (weight * (1 - upper_share)).ravel(), slots)
    mass += np.bincount((cell * HUE_BINS + (lower_bin + 1) % HUE_BINS).ravel(), (weight * upper_share).ravel(), slots)
    return mass.reshape(GRID * GRID, HUE_BINS)


def colour_differs(first: str | Path, second: str | Path) -> bool:
    """Whether two images' colours differ: one coloured and one grey, or a hue shift of at least `SHIFT` (each
    cell's share of its hue mass that moves, averaged over the cells coloured in both, weighted by their mass).

    An unreadable image differs in nothing it can be shown to.
    """
    one, other = hue_grid(first), hue_grid(second)
    if one is None or other is None:
        return False
    pixels = _SIDE * _SIDE
    coloured = one.sum() / pixels > _COLOURED, other.sum() / pixels > _COLOURED
    if coloured[0] != coloured[1]:
        return True
    cell_one, cell_other = one.sum(axis=1), other.sum(axis=1)
    both = (cell_one > 1e-9) & (cell_other > 1e-9)
    if not coloured[0] or not both.any():
        return False
    moved = 0.5 * np.abs(one[both] / cell_one[both, None] - other[both] / cell_other[both, None]).sum(axis=1)
    weight = (cell_one[both] + cell_other[both]) / 2
    return bool((moved * weight).sum() / weight.sum() >= SHIFT)


def recoloured_leaks(paths: list[Path], leaks: Leaks) -> np.ndarray:
    """`(N,)` bool: the leaked rows whose image and partner differ in colour (each file read once more)."""
    recoloured = np.zeros(len(paths), dtype=bool)
    for row in np.flatnonzero(leaks.leaked):
        recoloured[row] = colour_differs(paths[row], paths[int(leaks.partner[row])])
    return recoloured
