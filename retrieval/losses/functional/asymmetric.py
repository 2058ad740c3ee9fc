"""Asymmetric Loss for multi-label targets (Ridnik et al., ICCV 2021; docs/losses.md section 2).

Each label is an independent sigmoid. Negatives far outnumber positives in multi-label data, so
they get a stronger focusing exponent and a probability shift: a negative whose probability is
already below `clip` contributes nothing at all.
"""

from __future__ import annotations

import torch
from torch import Tensor

from retrieval.losses.functional._checks import check_gamma, check_reduction, reduce_loss

__all__ = ["asymmetric_loss"]

_LOG_EPS = 1e-8


def asymmetric_loss(
    logits: Tensor,
    targets: Tensor,
    gamma_pos: float = 0.0,
    gamma_neg: float = 4.0,
    clip: float = 0.05,
    reduction: str = "mean",
    no_focal_grad: bool = True,
) -> Tensor:
    """Asymmetric loss, summed over labels, computed in float32 (float64 input stays float64).

    ```
    p     = sigmoid(z);   p_m = max(p - clip, 0)
    L_pos = y       * (1 - p)^gamma_pos * log(p)
    L_neg = (1 - y) * p_m^gamma_neg     * log(1 - p_m)
    loss_i = -sum_j (L_pos + L_neg)
    ```
    The log arguments are clamped at 1e-8. With `gamma_pos = gamma_neg = 0` and `clip = 0` it
    equals `binary_cross_entropy_with_logits(z, y, reduction="none").sum(1)` (up to that clamp).

    Args:
        logits: `(B, C)` logits, for retrieval scaled cosines to the class proxies.
        targets: `(B, C)` multi-hot targets in {0, 1} (bool, int or float).
        gamma_pos: focusing exponent of the positives, >= 0; default 0.
        gamma_neg: focusing exponent of the negatives, >= 0; default 4.
        clip: probability shift of the negatives, in [0, 1); default 0.05.
        reduction: `"mean"` over samples, `"sum"`, or `"none"` for the `(B,)` losses.
        no_focal_grad: treat the focusing weights as constants (default), as the paper's code does.

    Returns:
        Scalar loss, or `(B,)` with `reduction="none"`.

    Raises:
        ValueError: on mismatched shapes, negative gammas, clip outside [0, 1) or an unknown reduction.
    """
    if logits.ndim != 2 or targets.shape != logits.shape:
        raise ValueError(
            f"logits and targets must both be (B, C) (targets multi-hot), got {tuple(logits.shape)} and "
            f"{tuple(targets.shape)}"
        )
    check_gamma(gamma_pos, "gamma_pos")
    check_gamma(gamma_neg, "gamma_neg")
    if not 0 <= clip < 1:
        raise ValueError(f"clip must lie in [0, 1) (0.05 is the paper's value), got {clip}")
    check_reduction(reduction)
    dtype = torch.promote_types(logits.dtype, torch.float32)
    with torch.autocast(logits.device.type, enabled=False):
        positive = targets.to(dtype=dtype)
        prob = torch.sigmoid(logits.to(dtype))
        # clamp(min=0) has zero gradient below clip: such negatives get exactly zero loss and gradient.
        shifted = (prob - clip).clamp(min=0.0) if clip > 0 else prob
        log_pos = prob.clamp(min=_LOG_EPS).log()
        log_neg = (1.0 - shifted).clamp(min=_LOG_EPS).log()
        with torch.set_grad_enabled(torch.is_grad_enabled() and not no_focal_grad):
            focus_pos = (1.0 - prob).pow(gamma_pos) if gamma_pos else None
            focus_neg = shifted.pow(gamma_neg) if gamma_neg else None
        term_pos = log_pos if focus_pos is None else focus_pos * log_pos
        term_neg = log_neg if focus_neg is None else focus_neg * log_neg
        losses = -(positive * term_pos + (1.0 - positive) * term_neg).sum(dim=1)
    return reduce_loss(losses, reduction)
