"""Circle Loss on P x K batches."""

import torch
from torch import Tensor

from retrieval.losses.base import PairLoss, PairMemory
from retrieval.losses.functional.pair import circle_loss, cosine_similarity_matrix, reference_labels
from retrieval.miners.masks import pair_masks

__all__ = ["CircleLoss"]


class CircleLoss(PairLoss):
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

    def __init__(self, m: float = 0.25, gamma: float = 256.0) -> None:
        super().__init__()
        if m < 0:
            raise ValueError(f"m must be >= 0 (the paper uses 0.25, or 0.4 for fine-grained data); got {m}.")
        if gamma <= 0:
            raise ValueError(f"gamma must be > 0 (the paper uses 256, 80 is common too); got {gamma}.")
        self.m = m
        self.gamma = gamma

    def pair_loss(self, embeddings: Tensor, labels: Tensor, memory: PairMemory | None) -> Tensor:
        """See `PairLoss.forward`; 0 (still backpropagating) if no anchor has both a positive and a negative."""
        memory_embeddings, memory_labels = memory or (None, None)
        ref_labels = reference_labels(labels, memory_embeddings, memory_labels)
        similarities = cosine_similarity_matrix(embeddings, memory_embeddings)
        loss = circle_loss(similarities, labels, m=self.m, gamma=self.gamma, ref_labels=ref_labels)
        with torch.no_grad():
            self.last_stats = {"valid_anchors": pair_masks(labels, ref_labels).valid_anchors.sum()}
        return loss

    def extra_repr(self) -> str:
        return f"m={self.m}, gamma={self.gamma}"
