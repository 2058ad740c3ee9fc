"""Target-logit margins of CosFace and ArcFace (docs/losses.md section 1, "Margin presets").

Each function changes only column `y_i` of each row of a `(B, K)` cosine matrix, before the
scale is applied: the target must beat the other classes by a margin to win the softmax.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["additive_angular_margin", "additive_cosine_margin"]

# acos has an infinite derivative at +-1: clamp just inside.
_ACOS_EPS = 1e-7


def additive_cosine_margin(cosine: Tensor, labels: Tensor, margin: float) -> Tensor:
    """CosFace (Wang et al., CVPR 2018): the target cosine becomes `cos - m`.

    Args:
        cosine: `(B, K)` cosines of each sample to every class.
        labels: `(B,)` target class indices.
        margin: m.

    Returns:
        `(B, K)` cosines, column y_i of row i lowered by m.
    """
    target = cosine.gather(1, labels.view(-1, 1))
    return cosine.scatter(1, labels.view(-1, 1), target - margin)


def additive_angular_margin(cosine: Tensor, labels: Tensor, margin: float) -> Tensor:
    """ArcFace (Deng et al., CVPR 2019): the target cosine becomes `cos(theta + m)`.

    Where `theta + m > pi`, `cos(theta + m)` would rise again with theta; there the usual
    monotone fallback `cos(theta) - m * sin(m)` keeps the target logit decreasing in theta (the
    rule of pytorch-metric-learning's `ArcFaceLoss`). Cosines are clamped to
    `[-1 + 1e-7, 1 - 1e-7]` before acos so the gradient stays finite.

    Args:
        cosine: `(B, K)` cosines of each sample to every class.
        labels: `(B,)` target class indices.
        margin: m, in radians (0.5 = 28.6 degrees).

    Returns:
        `(B, K)` cosines, column y_i of row i replaced.
    """
    target = cosine.gather(1, labels.view(-1, 1))
    theta = torch.acos(target.clamp(-1.0 + _ACOS_EPS, 1.0 - _ACOS_EPS))
    shifted = torch.where(theta + margin <= math.pi, torch.cos(theta + margin), target - margin * math.sin(margin))
    return cosine.scatter(1, labels.view(-1, 1), shifted)
