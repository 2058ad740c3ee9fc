"""Train and eval transforms, built by timm from the backbone's preprocessing config."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timm.data import create_transform
from torchvision.transforms import v2

__all__ = ["EVAL_CROP_PCT", "image_transforms", "tensor_transforms"]

# Resize(256) + CenterCrop(224): the evaluation protocol of the metric-learning benchmarks.
EVAL_CROP_PCT = 224 / 256


def image_transforms(image_size: int, data_config: dict[str, Any]) -> tuple[Callable, Callable]:
    """(train, eval) transforms for PIL images.

    Train: RandomResizedCrop + horizontal flip, no colour jitter (the benchmark recipe).
    Eval: resize to `image_size / 0.875`, center crop `image_size`.
    """
    common = {
        "input_size": image_size,
        "mean": data_config["mean"],
        "std": data_config["std"],
        "interpolation": data_config.get("interpolation", "bilinear"),
    }
    train = create_transform(is_training=True, hflip=0.5, color_jitter=None, **common)
    evaluation = create_transform(is_training=False, crop_pct=EVAL_CROP_PCT, **common)
    return train, evaluation


def tensor_transforms(data_config: dict[str, Any]) -> tuple[Callable, Callable]:
    """(train, eval) transforms for image tensors already at size, as the digits demo has.

    Train adds a small random affine jitter (handwriting varies in position, slant and size;
    flips would turn some digits into others).
    """
    normalize = v2.Normalize(mean=list(data_config["mean"]), std=list(data_config["std"]))
    train = v2.Compose([v2.RandomAffine(degrees=10, translate=(0.1, 0.1), scale=(0.9, 1.1)), normalize])
    return train, normalize
