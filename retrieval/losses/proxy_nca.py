"""Proxy-NCA with a fixed scale (the NormSoftmax form), losses.md section 1."""

from __future__ import annotations

from retrieval.losses.proxy_softmax import ProxySoftmaxLoss
from retrieval.losses.scales import FixedScale

__all__ = ["ProxyNCALoss"]


class ProxyNCALoss(ProxySoftmaxLoss):
    """Proxy-NCA: softmax cross-entropy over `s * cos(f_i, P_j)` to one proxy per class.

    Movshovitz-Attias et al., "No Fuss Distance Metric Learning using Proxies", ICCV 2017, in
    the normalized-softmax form of Zhai & Wu, "Classification is a Strong Baseline for Deep
    Metric Learning", BMVC 2019. Identical to pytorch-metric-learning's
    `ProxyNCALoss(distance=CosineSimilarity(), softmax_scale=scale)` with the same proxies.

    Args:
        num_classes: K, the number of training classes.
        embedding_dim: D, the embedding size.
        scale: the softmax scale s (inverse temperature); default 16.
    """

    def __init__(self, num_classes: int, embedding_dim: int, scale: float = 16.0) -> None:
        super().__init__(num_classes, embedding_dim, scale=FixedScale(scale))
