"""Asymmetric proxy loss for multi-label data: one sigmoid per class proxy, docs/losses.md section 2."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from retrieval.losses.base import MetricLoss
from retrieval.losses.functional._checks import check_gamma
from retrieval.losses.functional.asymmetric import asymmetric_loss
from retrieval.losses.functional.proxy import cosine_to_proxies
from retrieval.losses.proxy_softmax import make_proxies
from retrieval.losses.scales import FixedScale

__all__ = ["AsymmetricProxyLoss"]


class AsymmetricProxyLoss(MetricLoss):
    """Asymmetric Loss (Ridnik et al., "Asymmetric Loss For Multi-Label Classification", ICCV 2021) on proxy logits.

    An image may carry several labels: each class proxy is an independent sigmoid over
    `z_ij = s * cos(f_i, P_j)`, and the many negatives get a stronger focusing exponent and a
    probability shift (`clip`) so they do not drown the few positives. The model learns to
    place an image near the proxy of each of its labels, so images that share a label end up
    close, which is what multi-label retrieval scores.

    Args:
        num_classes: K, the number of training labels.
        embedding_dim: D, the embedding size.
        scale: s; default 16.
        gamma_pos: focusing exponent of the positives; default 0.
        gamma_neg: focusing exponent of the negatives; default 4.
        clip: probability shift of the negatives; default 0.05.

    Attributes:
        multi_label: True: `forward` takes `(B, K)` multi-hot targets (a `(B,)` class index is
            read as a one-hot row, so single-label data trains too).
        last_stats: detached `logits` (B, K) float32 and multi-hot `labels` (B, K) of the last call.
    """

    multi_label = True
    proxies: nn.Parameter

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        scale: float = 16.0,
        gamma_pos: float = 0.0,
        gamma_neg: float = 4.0,
        clip: float = 0.05,
    ) -> None:
        super().__init__()
        check_gamma(gamma_pos, "gamma_pos")
        check_gamma(gamma_neg, "gamma_neg")
        if not 0 <= clip < 1:
            raise ValueError(f"clip must lie in [0, 1) (0.05 is the paper's value), got {clip}")
        self.proxies = make_proxies(num_classes, embedding_dim)
        self.scale = FixedScale(scale)
        self.gamma_pos, self.gamma_neg, self.clip = float(gamma_pos), float(gamma_neg), float(clip)

    @property
    def logit_scale(self) -> float:
        """s, the scale of the logits `s * cos`."""
        return self.scale.base_scale

    def forward(self, embeddings: Tensor, targets: Tensor) -> Tensor:
        """Loss of raw embeddings `(B, D)` against `(B, K)` multi-hot targets (or `(B,)` class indices)."""
        num_classes = self.proxies.shape[0]
        if targets.ndim == 1:
            targets = F.one_hot(targets, num_classes)
        if targets.shape != (embeddings.shape[0], num_classes):
            raise ValueError(
                f"targets must be ({embeddings.shape[0]}, {num_classes}) multi-hot rows, one column per proxy, "
                f"or ({embeddings.shape[0]},) class indices; got {tuple(targets.shape)}"
            )
        cosine = cosine_to_proxies(embeddings, self.proxies)
        logits = self.scale(cosine, targets).unsqueeze(1) * cosine
        self.last_stats = {"logits": logits.detach(), "labels": targets.detach()}
        return asymmetric_loss(logits, targets, self.gamma_pos, self.gamma_neg, self.clip)

    def extra_repr(self) -> str:
        return f"gamma_pos={self.gamma_pos}, gamma_neg={self.gamma_neg}, clip={self.clip}"
