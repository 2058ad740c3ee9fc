"""Class-balanced sampling: every class is drawn with the same probability (oversampling the tail)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import WeightedRandomSampler

__all__ = ["balanced_sampler"]


def balanced_sampler(labels: np.ndarray, generator: torch.Generator | None = None) -> WeightedRandomSampler:
    """A sampler that draws a class uniformly, then one of its images uniformly, with replacement.

    Each image of class c gets weight 1 / n_c, so every class carries the same total weight and
    is drawn with probability 1 / K whatever its size: rare classes are oversampled (their images
    repeat within an epoch) and common ones undersampled. An epoch draws as many images as the
    training set holds, so the number of steps per epoch matches the random sampler's. The
    long-tail baseline of e.g. Kang et al., "Decoupling Representation and Classifier for
    Long-Tailed Recognition", ICLR 2020 ("class-balanced sampling").

    Args:
        labels: `(N,)` class of every training image.
        generator: the random source (the trainer reseeds it every epoch, so epochs replay on resume).

    Returns:
        A `torch.utils.data.WeightedRandomSampler` over the N indices.

    Raises:
        ValueError: if `labels` is empty or not 1-D.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) == 0:
        raise ValueError(f"labels must be a non-empty (N,) array, got shape {labels.shape}")
    _, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
    weights = (1.0 / counts[codes.reshape(-1)]).tolist()  # the sampler makes these float64 again
    return WeightedRandomSampler(weights, num_samples=len(labels), replacement=True, generator=generator)
