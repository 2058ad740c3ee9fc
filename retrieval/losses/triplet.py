"""Triplet margin loss with a pluggable miner, on P x K batches."""

import torch
from torch import Tensor

from retrieval.losses.base import PairLoss, PairMemory
from retrieval.losses.functional.pair import (
    cosine_similarity_matrix,
    euclidean_distance_matrix,
    mean_over_active,
    reference_labels,
    triplet_margin_losses,
)
from retrieval.miners import TripletMiner, build_miner

__all__ = ["TripletLoss"]


class TripletLoss(PairLoss):
    """Triplet margin loss [d(a, p) - d(a, n) + margin]_+ on Euclidean distances of unit vectors.

    Schroff et al. 2015 ("FaceNet"); batch-hard mining from Hermans et al. 2017. The loss is the
    mean over the mined triplets whose loss is > 0 (0 when none is), the convention of
    pytorch-metric-learning; with `miner="all"` it equals its `TripletMarginLoss(margin)`.

    Memory: the distance matrix is (B, B); "batch_hard" mines B triplets and "semihard" one per
    positive pair, B * (K - 1) on a P x K batch. "all" mines B * (K - 1) * (B - K) triplets, about
    3 B^2 at K = 4, and keeps a few tensors of that length: about 50 bytes per triplet with its
    backward, so 40 MB at B = 512, 160 MB at B = 1024 and 650 MB at B = 2048, where it stops
    being sensible; use "semihard" or "batch_hard" for large batches.

    Args:
        margin: required gap between d(a, n) and d(a, p); default 0.2. Distances are in [0, 2].
        miner: a name of the registry `retrieval.miners.MINERS` ("all", "batch_hard", "semihard"; built with
            this margin) or a `TripletMiner` instance.

    Raises:
        ValueError: if margin is negative or the miner name is unknown.

    Attributes:
        last_stats: after each forward, {"triplets": number of mined triplets,
            "active_fraction": fraction of them with a loss > 0}.
    """

    def __init__(self, margin: float = 0.2, miner: str | TripletMiner = "semihard") -> None:
        super().__init__()
        if margin < 0:
            raise ValueError(f"margin must be >= 0 (0.2 is the usual value for unit vectors); got {margin}.")
        self.margin = margin
        self.miner = build_miner(miner, margin) if isinstance(miner, str) else miner

    def pair_loss(self, embeddings: Tensor, labels: Tensor, memory: PairMemory | None) -> Tensor:
        """See `PairLoss.forward`: anchors from the batch, positives and negatives from the batch and the memory.

        0 (still backpropagating) when no triplet is mined or none violates the margin.
        """
        memory_embeddings, memory_labels = memory or (None, None)
        ref_labels = reference_labels(labels, memory_embeddings, memory_labels)
        distances = euclidean_distance_matrix(cosine_similarity_matrix(embeddings, memory_embeddings))
        losses = triplet_margin_losses(distances, self.miner(distances, labels, ref_labels), self.margin)
        with torch.no_grad():
            self.last_stats = {
                "triplets": torch.tensor(losses.numel()),
                "active_fraction": (losses > 0).sum() / max(losses.numel(), 1),
            }
        return mean_over_active(losses)

    def extra_repr(self) -> str:
        return f"margin={self.margin}, miner={type(self.miner).__name__}"
