"""The two augmented views of every unlabeled image, and the dataset that yields them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from retrieval.config import AugmentConfig, PretrainConfig
from retrieval.data.image_dataset import ImageDataset
from retrieval.data.transforms import ModelDataConfig, build_train_transform

__all__ = ["TwoViews", "view_augment", "views_dataset"]


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


class TwoViews:
    """A picture -> `(2, C, H, W)`: the same random pipeline applied twice."""

    def __init__(self, transform: Callable[[Any], Tensor]) -> None:
        self.transform = transform

    def __call__(self, image: Any) -> Tensor:
        return torch.stack([self.transform(image), self.transform(image)])


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
    return ImageDataset(paths, np.arange(len(paths)), TwoViews(transform), on_bad_image)
