"""CosFace: proxy softmax with an additive cosine margin on the target, docs/losses.md section 1."""

from __future__ import annotations

from retrieval.losses.margin_presets import CosineMargin
from retrieval.losses.proxy_softmax import ProxySoftmaxLoss
from retrieval.losses.scales import FixedScale

__all__ = ["CosFaceLoss"]


class CosFaceLoss(ProxySoftmaxLoss):
    """Softmax over `s * cos` with the target logit `s * (cos - m)` (Wang et al., "CosFace", CVPR 2018).

    The target must beat every other class by m in cosine: tighter classes than Proxy-NCA's.
    Equal to pytorch-metric-learning's `CosFaceLoss(margin=m, scale=s)` with the same weights.

    Args:
        num_classes: K, the number of training classes.
        embedding_dim: D, the embedding size.
        scale: s; default 30.
        margin: m; default 0.35.
    """

    def __init__(self, num_classes: int, embedding_dim: int, scale: float = 30.0, margin: float = 0.35) -> None:
        super().__init__(num_classes, embedding_dim, scale=FixedScale(scale), margin=CosineMargin(margin))
