"""JPEG files whose pixels are stored sideways with an EXIF orientation tag, as phones and cameras write them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

# Upright: 64 high, 32 wide; a red top half, a green bottom-left and a blue bottom-right quarter.
# Flat 16-pixel blocks, so JPEG's 8x8 (chroma 16x16) blocks keep the colours nearly exact.
UPRIGHT = np.zeros((64, 32, 3), dtype=np.uint8)
UPRIGHT[:32] = (220, 30, 30)
UPRIGHT[32:, :16] = (30, 200, 30)
UPRIGHT[32:, 16:] = (30, 30, 220)
ROTATE_90_CLOCKWISE = 6  # EXIF Orientation: the stored pixels must turn 90° clockwise to be seen upright


def write_oriented_jpegs(directory: Path) -> tuple[Path, Path, Path]:
    """`(upright, sideways, untagged)` JPEGs of `UPRIGHT`.

    `sideways` stores the pixels turned 90° counter-clockwise with Orientation 6, so a viewer (and
    every reader of the toolkit) shows `UPRIGHT`; `untagged` stores the same sideways pixels without the tag.
    """
    directory.mkdir(parents=True, exist_ok=True)
    upright = Image.fromarray(UPRIGHT)
    stored = upright.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = ROTATE_90_CLOCKWISE
    paths = directory / "upright.jpg", directory / "sideways.jpg", directory / "untagged.jpg"
    upright.save(paths[0], quality=95)
    stored.save(paths[1], quality=95, exif=exif)
    stored.save(paths[2], quality=95)
    return paths
