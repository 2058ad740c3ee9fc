"""Batch-hard mining: per anchor, its farthest positive and nearest negative."""

import torch
from torch import Tensor

from retrieval.miners.base import TripletMiner
from retrieval.miners.types import PairMasks, TripletIndices

__all__ = ["BatchHardMiner"]


class BatchHardMiner(TripletMiner):
    """One triplet per anchor: its farthest positive and its nearest negative.

    Hermans et al. 2017, "In Defense of the Triplet Loss for Person Re-Identification".
    Anchors without a positive or without a negative in the batch yield no triplet; ties go to
    the lowest index. Memory: (B, B).
    """

    def _mine(self, distances: Tensor, masks: PairMasks) -> TripletIndices:
        farthest_positive = distances.masked_fill(~masks.positive, -torch.inf).argmax(dim=1)
        nearest_negative = distances.masked_fill(~masks.negative, torch.inf).argmin(dim=1)
        anchor = masks.valid_anchors.nonzero(as_tuple=True)[0]
        return TripletIndices(anchor=anchor, positive=farthest_positive[anchor], negative=nearest_negative[anchor])
