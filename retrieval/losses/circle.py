"""Circle Loss on P x K batches."""

import torch
from torch import Tensor

from retrieval.losses.base import MetricLoss
from retrieval.losses.functional.pair import circle_loss, cosine_similarity_matrix, reference_labels
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

    def forward(
        self,
        embeddings: Tensor,
        labels: Tensor,
        memory_embeddings: Tensor | None = None,
        memory_labels: Tensor | None = None,
    ) -> Tensor:
        """Loss of one batch, each anchor against the rest of the batch and, when given, a memory of earlier batches.

        Args:
            embeddings: raw embeddings (B, D); normalized here, computed in float32.
            labels: class ids (B,).
            memory_embeddings: raw embeddings of earlier batches (M, D), detached, or None
                (`retrieval.losses.CrossBatchMemory` passes them).
            memory_labels: their class ids (M,), or None.

        Returns:
            Scalar loss; 0 (still backpropagating) if no anchor has both a positive and a negative.
        """
        ref_labels = reference_labels(labels, memory_embeddings, memory_labels)
        similarities = cosine_similarity_matrix(embeddings, memory_embeddings)
        loss = circle_loss(similarities, labels, m=self.m, gamma=self.gamma, ref_labels=ref_labels)
        with torch.no_grad():
            self.last_stats = {"valid_anchors": pair_masks(labels, ref_labels).valid_anchors.sum()}
        return loss

    def extra_repr(self) -> str:
        return f"m={self.m}, gamma={self.gamma}"
