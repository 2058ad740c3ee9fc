"""Per-class loss weights from training class counts: the classic re-weighting baselines for long tails.

- `inverse`: w_c proportional to 1 / n_c.
- `effective_number` (Cui et al., "Class-Balanced Loss Based on Effective Number of Samples",
  CVPR 2019): w_c proportional to (1 - beta) / (1 - beta^{n_c}), the inverse of the "effective
  number" of samples; beta = 0 gives equal weights, beta -> 1 approaches `inverse`. The paper
  tries beta in {0.9, 0.99, 0.999, 0.9999}.

Normalisation: the weights are scaled so that their mean over the K classes is 1 (sum = K, as
in Cui et al.). A balanced training set therefore gets all-ones weights, and the loss keeps the
scale the learning rate was tuned for when the imbalance is mild. Note that the loss is the
mean over the batch of w_{y_i} CE_i, so on a long-tailed batch (mostly head classes, weights < 1)
the average weight per sample is below 1.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["CLASS_WEIGHTINGS", "class_weights"]

CLASS_WEIGHTINGS = ("none", "inverse", "effective_number")


def class_weights(counts: np.ndarray | Tensor, mode: str, beta: float = 0.999) -> Tensor | None:
    """Weights `(K,)` with mean 1 over the classes, or None for `mode="none"`.

    Args:
        counts: `(K,)` training images of each class, all >= 1.
        mode: `none`, `inverse` or `effective_number`.
        beta: effective-number hyperparameter in [0, 1); used only by `effective_number`.

    Returns:
        float32 `(K,)` weights averaging 1, larger for rarer classes; None when `mode` is `none`.

    Raises:
        ValueError: an unknown mode, beta outside [0, 1), or a class count below 1.
    """
    if mode not in CLASS_WEIGHTINGS:
        raise ValueError(f"class_weights must be one of {', '.join(CLASS_WEIGHTINGS)}, got {mode!r}")
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"beta must lie in [0, 1) (Cui et al. use 0.9 to 0.9999), got {beta}")
    if mode == "none":
        return None
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or len(counts) == 0 or counts.min() < 1:
        raise ValueError(f"class weights need a (K,) count of at least 1 image per training class, got {counts}")
    if mode == "inverse":
        raw = 1.0 / counts
    else:
        raw = (1.0 - beta) / -np.expm1(counts * np.log(beta)) if beta > 0 else np.ones_like(counts)
    return torch.from_numpy(raw / raw.mean()).float()
