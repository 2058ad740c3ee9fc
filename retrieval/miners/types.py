"""Typed containers for what miners produce: triplet indices and the label masks of a batch."""

from typing import NamedTuple

from torch import Tensor

__all__ = ["PairMasks", "TripletIndices"]


class TripletIndices(NamedTuple):
    """Mined triplets as three aligned index tensors into the batch, each (T,) int64.

    Triplet t is (anchor[t], positive[t], negative[t]): labels[anchor[t]] == labels[positive[t]]
    != labels[negative[t]] and anchor[t] != positive[t]. T may be 0.
    """

    anchor: Tensor
    positive: Tensor
    negative: Tensor


class PairMasks(NamedTuple):
    """Which pairs (i, j) of a batch are positive or negative, from label equality.

    Attributes:
        positive: (B, B) bool, True where labels match and i != j.
        negative: (B, B) bool, True where labels differ.
    """

    positive: Tensor
    negative: Tensor

    @property
    def valid_anchors(self) -> Tensor:
        """(B,) bool: anchors with at least one positive and one negative in the batch."""
        return self.positive.any(dim=1) & self.negative.any(dim=1)
