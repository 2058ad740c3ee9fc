"""The one interface every triplet miner honours."""

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from retrieval.miners.masks import check_pairwise
from retrieval.miners.types import TripletIndices

__all__ = ["TripletMiner"]


class TripletMiner(ABC):
    """Picks (anchor, positive, negative) triplets of a batch from its distance matrix.

    Mining only selects indices: it runs without autograd on detached distances, and the loss
    then gathers the selected distances from the graph-connected matrix.
    """

    def __call__(self, distances: Tensor, labels: Tensor) -> TripletIndices:
        """Mine the triplets of one batch.

        Args:
            distances: Euclidean distances between the batch's L2-normalized embeddings (B, B).
            labels: class ids (B,).

        Returns:
            `TripletIndices` of (T,) int64 tensors on the device of `distances`.

        Raises:
            ValueError: if the shapes do not match.
        """
        check_pairwise(distances, labels, "distances")
        with torch.no_grad():
            return self._mine(distances.detach(), labels)

    @abstractmethod
    def _mine(self, distances: Tensor, labels: Tensor) -> TripletIndices:
        """Select triplets from checked, detached (B, B) distances and (B,) labels."""
