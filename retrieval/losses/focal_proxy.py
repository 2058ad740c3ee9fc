"""Focal Proxy-NCA: the fixed-scale proxy softmax with focal weighting, docs/losses.md section 1."""

from __future__ import annotations

from collections.abc import Sequence

from retrieval.losses.proxy_softmax import ProxySoftmaxLoss
from retrieval.losses.scales import FixedScale
from retrieval.losses.weightings import FocalWeighting

__all__ = ["FocalProxyLoss"]


class FocalProxyLoss(ProxySoftmaxLoss):
    """Proxy-NCA whose per-sample cross-entropy is scaled by `alpha_{y_i} * (1 - p_t)^gamma`.

    Focal loss (Lin et al., "Focal Loss for Dense Object Detection", ICCV 2017) on the logits
    `s * cos(f_i, P_j)`: samples the proxies already classify well (p_t near 1) fade out, so
    the hard and rare ones drive training. Equals `ProxyNCALoss(scale=s)` at gamma = 0 without
    alpha, and `retrieval.losses.functional.focal_loss` of its logits in general.

    Args:
        num_classes: K, the number of training classes.
        embedding_dim: D, the embedding size.
        scale: the softmax scale s; default 16.
        gamma: focusing exponent, >= 0; default 2.
        alpha: optional K per-class weights (e.g. inverse class frequency for a long tail).

    Raises:
        ValueError: on negative gamma or an alpha whose length is not K.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        scale: float = 16.0,
        gamma: float = 2.0,
        alpha: Sequence[float] | None = None,
    ) -> None:
        if alpha is not None and len(alpha) != num_classes:
            raise ValueError(f"alpha must hold one weight per class ({num_classes}), got {len(alpha)}")
        super().__init__(num_classes, embedding_dim, scale=FixedScale(scale), weighting=FocalWeighting(gamma, alpha))
