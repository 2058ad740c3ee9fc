"""The two augmented views of every unlabeled image, and the dataset that yields them."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from retrieval.config import AugmentConfig, PretrainConfig
from retrieval.data.image_dataset import ImageDataset
from retrieval.data.transforms import ModelDataConfig, build_train_transform
from retrieval.images import border_colour

__all__ = ["TwoViews", "one_ink", "view_augment", "views_dataset"]

# A pixel is drawn where its colour is this far (sum over R, G, B) from the background's.
_DRAWN_DISTANCE = 60.0


def view_augment(augment: AugmentConfig, pretrain: PretrainConfig) -> AugmentConfig:
    """The `augment` section with pretraining's crop and photometric knobs in place of its own.

    The rest (affine, flip, fill, erasing) stays the section's, so a preset that keeps glyphs
    unflipped keeps their views unflipped too. Auto-augment is left out: it would replace the colour jitter.
    """
    return augment.model_copy(
        update={
            "crop_scale": pretrain.crop_scale,
            "color_jitter": pretrain.color_jitter,
            "hue_jitter": pretrain.hue_jitter,
            "grayscale": pretrain.grayscale,
            "blur": pretrain.blur,
            "auto_augment": None,
        }
    )


def one_ink(image: Image.Image) -> Image.Image:
    """The drawing in one random ink on random light paper: the way a monochrome artwork set draws it.

    The background is the border's colour (`border_colour`, as `augment.fill: auto` reads it); a pixel
    is ink where it is away from that colour and not among the drawing's lightest (a random 0-30%, so
    highlights and windows stay paper). The draws come from Python's `random`, as timm's transforms
    take theirs: the loader seeds it per worker.
    """
    picture = image.convert("RGB")
    rgb = np.asarray(picture, dtype=np.float32)
    drawn = np.abs(rgb - np.asarray(border_colour(picture), dtype=np.float32)).sum(axis=2) > _DRAWN_DISTANCE
    if drawn.any():
        gray = rgb.mean(axis=2)
        drawn &= gray <= np.quantile(gray[drawn], random.uniform(0.7, 1.0))
    ink = np.array([random.randint(0, 140) for _ in range(3)], dtype=np.uint8)
    paper = np.array([random.randint(190, 255) for _ in range(3)], dtype=np.uint8)
    return Image.fromarray(np.where(drawn[..., None], ink, paper))


class TwoViews:
    """A picture -> `(2, C, H, W)`: the same random pipeline applied twice, each view first redrawn in
    one ink with probability `one_ink_probability` (`pretrain.one_ink`)."""

    def __init__(self, transform: Callable[[Any], Tensor], one_ink_probability: float = 0.0) -> None:
        self.transform = transform
        self.one_ink_probability = one_ink_probability

    def __call__(self, image: Any) -> Tensor:
        first = self.transform(self._drawing(image))
        return torch.stack([first, self.transform(self._drawing(image))])

    def _drawing(self, image: Any) -> Any:
        """The image, or with probability `one_ink_probability` its one-ink redrawing."""
        if self.one_ink_probability > 0.0 and random.random() < self.one_ink_probability:
            return one_ink(image)
        return image


def views_dataset(
    paths: list[Path],
    augment: AugmentConfig,
    pretrain: PretrainConfig,
    image_size: int,
    data_config: ModelDataConfig,
    in_chans: int,
    on_bad_image: str,
) -> ImageDataset:
    """Items `((2, C, H, W) views, index)`: the image's position is its label (each image its own class)."""
    transform = build_train_transform(view_augment(augment, pretrain), image_size, data_config, in_chans)
    return ImageDataset(paths, np.arange(len(paths)), TwoViews(transform, pretrain.one_ink), on_bad_image)
