"""The embedded demo: scikit-learn's bundled handwritten digits as 3-channel images, closed-set split."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["DigitsDataset", "load_digits_split"]

# Fixed split: the demo's numbers must mean the same thing on every machine.
_SPLIT_SEED = 0


def load_digits_split(split: str, image_size: int = 32) -> tuple[Tensor, np.ndarray]:
    """Images `(N, 3, S, S)` in [0, 1] and labels `(N,)` of one half of the digits.

    Closed-set split: a stratified half of each digit's 1,797 images trains (`train`), the
    other half (`test`) serves as queries and gallery. Five training digits would be too few
    classes for a zero-shot split.
    """
    if split not in ("train", "test"):
        raise ValueError(f"digits split must be 'train' or 'test', got {split!r}")
    bunch = load_digits()
    indices = np.arange(len(bunch.target))
    train_idx, test_idx = train_test_split(indices, test_size=0.5, stratify=bunch.target, random_state=_SPLIT_SEED)
    chosen = np.sort(train_idx if split == "train" else test_idx)
    images = torch.from_numpy(bunch.images[chosen]).float().div_(16.0).unsqueeze(1)
    images = F.interpolate(images, size=(image_size, image_size), mode="bilinear", align_corners=False)
    return images.expand(-1, 3, -1, -1).contiguous(), bunch.target[chosen].astype(np.int64)


class DigitsDataset(Dataset):
    """In-memory digits images; items are `(image (3, S, S), label)`.

    Args:
        images: `(N, 3, S, S)` float images in [0, 1] (from `load_digits_split`, or a subset of them).
        labels: `(N,)` class indices.
        transform: applied to each `(3, S, S)` float tensor (augmentation and normalization).
    """

    def __init__(self, images: Tensor, labels: np.ndarray, transform: Callable[[Tensor], Tensor] | None = None) -> None:
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels = images, labels
        self.transform = transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        image = self.images[index]
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.labels[index])
