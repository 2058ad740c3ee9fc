"""The size the evaluation geometry resizes an image to, by `eval_mode`: torchvision's arithmetic, without torch.

`retrieval.data.transforms` resizes with torchvision and `retrieval.core.preprocess` with Pillow;
both resize first and crop or pad after, so the resized image, not the model's input, is what
preprocessing one image costs. `center_crop` keeps the aspect ratio with the shorter side at
`floor(image_size / crop_pct)`, so a 1 x 400,000 image becomes 36 x 14,400,000 pixels at a 32-pixel
input: the serve path asks for this size before it decodes an upload (`retrieval.serve.uploads`).
"""

from __future__ import annotations

import math

__all__ = ["longer_side_to", "resized_size", "shorter_side_to"]


def shorter_side_to(width_height: tuple[int, int], side: int) -> tuple[int, int]:
    """`(width, height)` with the shorter side `side` and the aspect ratio kept (torchvision's `Resize(int)`).

    Example:
        >>> shorter_side_to((1, 400), 36), shorter_side_to((300, 200), 36)
        ((36, 14400), (54, 36))
    """
    width, height = width_height
    short, long = min(width, height), max(width, height)
    new_long = int(side * long / short)
    return (side, new_long) if width <= height else (new_long, side)


def longer_side_to(width_height: tuple[int, int], side: int) -> tuple[int, int]:
    """`(width, height)` with the longer side `side` and the aspect ratio kept (`Resize(None, max_size=side)`).

    The shorter side truncates to 0 for an image more than `side` times longer than wide.
    """
    width, height = width_height
    short, long = min(width, height), max(width, height)
    new_short = int(side * short / long)
    return (new_short, side) if width <= height else (side, new_short)


def resized_size(
    eval_mode: str, image_size: int, crop_pct: float | None, width_height: tuple[int, int]
) -> tuple[int, int]:
    """The `(width, height)` that `eval_mode`'s resize gives a `width_height` image, before its crop or pad.

    Args:
        eval_mode: `center_crop`, `resize` or `pad_square` (`augment.eval_mode`, preprocess.json's `resize_mode`).
        image_size: the side of the model's square input.
        crop_pct: `center_crop`'s share of the resized shorter side (None for the other modes).
        width_height: the decoded image's size.
    """
    if eval_mode == "center_crop":
        return shorter_side_to(width_height, math.floor(image_size / (crop_pct or 1.0)))
    if eval_mode == "resize":
        return image_size, image_size
    return longer_side_to(width_height, image_size)
