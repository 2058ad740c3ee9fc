"""The one interface every triplet miner honours."""

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from retrieval.miners.masks import check_pairwise, pair_masks
from retrieval.miners.types import PairMasks, TripletIndices

__all__ = ["TripletMiner"]


class TripletMiner(ABC):
    """Picks (anchor, positive, negative) triplets of a batch from its distance matrix.

    Mining only selects indices: it runs without autograd on detached distances, and the loss
    then gathers the selected distances from the graph-connected matrix.
    """

    def __call__(self, distances: Tensor, labels: Tensor, ref_labels: Tensor | None = None) -> TripletIndices:
        """Mine the triplets of one batch, anchors in the batch, positives and negatives among its references.

        Args:
            distances: Euclidean distances between the batch's L2-normalized embeddings (B, B), or
                from the batch to its references (B, N).
            labels: class ids (B,).
            ref_labels: class ids of the references (N,), the batch's first (see `pair_masks`);
                None: the references are the batch.

        Returns:
            `TripletIndices` of (T,) int64 tensors on the device of `distances`: anchors index the
            batch, positives and negatives the columns of `distances`.

        Raises:
            ValueError: if the shapes do not match.
        """
        check_pairwise(distances, labels, "distances", ref_labels)
        with torch.no_grad():
            return self._mine(distances.detach(), pair_masks(labels, ref_labels))

    @abstractmethod
    def _mine(self, distances: Tensor, masks: PairMasks) -> TripletIndices:
        """Select triplets from checked, detached (B, N) distances and the pair masks of their labels."""
