"""Circle Loss on P x K batches."""

import torch
from torch import Tensor

from retrieval.losses.base import MetricLoss
from retrieval.losses.functional.pair import circle_loss, cosine_similarity_matrix
from retrieval.miners.masks import pair_masks

__all__ = ["CircleLoss"]


class CircleLoss(MetricLoss):
    """Circle Loss, per anchor over the batch (Sun et al., CVPR 2020).

    Each anchor's positives are pushed towards cosine 1 + m and its negatives towards -m, with
    self-paced weights that grow the further a similarity is from its optimum. Needs batches
    with several images per class (`retrieval.data.PKSampler`). See
    `retrieval.losses.functional.circle_loss` for the formula; it equals pytorch-metric-learning's
    `CircleLoss(m, gamma)`. Memory: a few (B, B) tensors.

    Args:
        m: relaxation margin; paper defaults 0.25 (face recognition, retrieval), 0.4 (fine-grained).
        gamma: scale applied to raw cosines; paper default 256 (80 is common too). Do not
            pre-scale the embeddings or cosines.

    Raises:
        ValueError: if m is negative or gamma is not positive.

    Attributes:
        last_stats: after each forward, {"valid_anchors": number of anchors with a positive and a negative}.
    """

    needs_pk_batches = True
    proxies = None

    def __init__(self, m: float = 0.25, gamma: float = 256.0) -> None:
        super().__init__()
        if m < 0:
            raise ValueError(f"m must be >= 0 (the paper uses 0.25, or 0.4 for fine-grained data); got {m}.")
        if gamma <= 0:
            raise ValueError(f"gamma must be > 0 (the paper uses 256, 80 is common too); got {gamma}.")
        self.m = m
        self.gamma = gamma

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        """Loss of one batch.

        Args:
            embeddings: raw embeddings (B, D); normalized here, computed in float32.
            labels: class ids (B,).

        Returns:
            Scalar loss; 0 (still backpropagating) if no anchor has both a positive and a negative.
        """
        loss = circle_loss(cosine_similarity_matrix(embeddings), labels, m=self.m, gamma=self.gamma)
        with torch.no_grad():
            self.last_stats = {"valid_anchors": pair_masks(labels).valid_anchors.sum()}
        return loss

    def extra_repr(self) -> str:
        return f"m={self.m}, gamma={self.gamma}"
