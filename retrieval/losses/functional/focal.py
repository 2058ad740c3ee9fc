"""Focal weighting of softmax cross-entropy (Lin et al., ICCV 2017; docs/losses.md section 1).

`loss_i = -alpha_{y_i} * (1 - p_t)^gamma * log p_t`: well-classified samples (p_t near 1)
are down-weighted so that training concentrates on the hard ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from retrieval.losses.functional._checks import check_gamma, check_reduction, reduce_loss

__all__ = ["focal_loss", "focal_modulation"]


def focal_loss(
    logits: Tensor, targets: Tensor, gamma: float = 2.0, alpha: Tensor | None = None, reduction: str = "mean"
) -> Tensor:
    """Focal loss of softmax logits, computed in float32 (float64 input stays float64).

    With `gamma = 0` and no alpha it equals `F.cross_entropy`, loss and gradient. Extreme
    logits (+-1e4) and float16 input give a finite loss and gradient.

    Args:
        logits: `(B, C)` unnormalized scores.
        targets: `(B,)` class indices in `[0, C)`.
        gamma: focusing exponent, >= 0; default 2.
        alpha: optional `(C,)` class weights (e.g. inverse frequency for a long tail).
        reduction: `"mean"` over samples, `"sum"`, or `"none"` for the `(B,)` losses.

    Returns:
        Scalar loss, or `(B,)` with `reduction="none"`.

    Raises:
        ValueError: on bad shapes, negative gamma or an unknown reduction.
    """
    _check_focal(logits, targets, gamma, alpha, reduction)
    dtype = torch.promote_types(logits.dtype, torch.float32)
    with torch.autocast(logits.device.type, enabled=False):
        cross_entropy = F.cross_entropy(logits.to(dtype), targets, reduction="none")
        losses = focal_modulation(cross_entropy, targets, gamma, alpha) * cross_entropy
    return reduce_loss(losses, reduction)


def focal_modulation(cross_entropy: Tensor, targets: Tensor, gamma: float, alpha: Tensor | None = None) -> Tensor:
    """Per-sample factor `alpha_{y_i} * (1 - p_t)^gamma`, differentiable (it is part of the focal gradient).

    `1 - p_t` is computed as `-expm1(-CE)` (exact for p_t near 1); for `gamma < 1` it is
    floored at the smallest normal float, so that the gradient stays finite where p_t rounds to 1.

    Args:
        cross_entropy: `(B,)` per-sample cross-entropy `-log p_t`.
        targets: `(B,)` target class indices (to pick alpha).
        gamma: focusing exponent, >= 0.
        alpha: optional `(C,)` class weights.

    Returns:
        `(B,)` factors; all ones for gamma = 0 and no alpha.
    """
    if gamma == 0:
        factor = torch.ones_like(cross_entropy)
    else:
        minus_miss = torch.expm1(cross_entropy.neg())  # p_t - 1
        if gamma == 2:  # the default: one square, no negation
            factor = minus_miss.square()
        else:
            miss = minus_miss.neg()
            if gamma < 1:  # x^gamma has an infinite slope at 0 only for gamma < 1
                miss = miss.clamp(min=_tiny(cross_entropy))
            factor = miss.pow(gamma)
    if alpha is not None:
        factor = factor * alpha.to(device=cross_entropy.device, dtype=cross_entropy.dtype)[targets]
    return factor


def _tiny(tensor: Tensor) -> float:
    return torch.finfo(tensor.dtype).tiny


def _check_focal(logits: Tensor, targets: Tensor, gamma: float, alpha: Tensor | None, reduction: str) -> None:
    if logits.ndim != 2:
        raise ValueError(f"logits must be (B, C), got shape {tuple(logits.shape)}")
    if targets.shape != (logits.shape[0],) or targets.is_floating_point():
        raise ValueError(
            f"targets must be ({logits.shape[0]},) integer class indices, got {targets.dtype} {tuple(targets.shape)}"
        )
    check_gamma(gamma)
    if alpha is not None and tuple(alpha.shape) != (logits.shape[1],):
        raise ValueError(f"alpha must hold one weight per class, shape ({logits.shape[1]},); got {tuple(alpha.shape)}")
    check_reduction(reduction)
