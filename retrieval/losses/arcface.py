"""ArcFace: proxy softmax with an additive angular margin on the target, docs/losses.md section 1."""

from __future__ import annotations

from retrieval.losses.margin_presets import AngularMargin
from retrieval.losses.proxy_softmax import ProxySoftmaxLoss
from retrieval.losses.scales import FixedScale

__all__ = ["ArcFaceLoss"]


class ArcFaceLoss(ProxySoftmaxLoss):
    """Softmax over `s * cos` with the target logit `s * cos(theta + m)` (Deng et al., "ArcFace", CVPR 2019).

    The margin is a constant angle m (radians) between a sample and its proxy. Where
    `theta + m > pi` the target logit falls back to `s * (cos - m sin m)`, which keeps it
    decreasing in theta. Equal to pytorch-metric-learning's `ArcFaceLoss(margin=degrees(m),
    scale=s)` with the same weights (PML takes the margin in degrees).

    Args:
        num_classes: K, the number of training classes.
        embedding_dim: D, the embedding size.
        scale: s; default 30.
        margin: m in radians; default 0.5 (28.6 degrees).
    """

    def __init__(self, num_classes: int, embedding_dim: int, scale: float = 30.0, margin: float = 0.5) -> None:
        super().__init__(num_classes, embedding_dim, scale=FixedScale(scale), margin=AngularMargin(margin))
