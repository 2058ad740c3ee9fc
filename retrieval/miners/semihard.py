"""Semi-hard mining: per positive pair, the nearest negative that is still farther than the positive."""

import torch
from torch import Tensor

from retrieval.miners.base import TripletMiner
from retrieval.miners.types import PairMasks, TripletIndices

__all__ = ["SemiHardMiner"]


class SemiHardMiner(TripletMiner):
    """One triplet per (anchor, positive) pair, with a semi-hard negative when there is one.

    Schroff et al. 2015, "FaceNet". For each pair (a, p) with d_ap = d(a, p), the negatives n with
    d_ap < d(a, n) < d_ap + margin are semi-hard; the triplet takes the nearest of them. When the
    pair has none, it falls back to the anchor's hardest (nearest) negative. Anchors without a
    negative yield no triplet; ties go to the lowest index.

    Vectorized with one row-wise sort and a batched `searchsorted`: memory (B, B), no B^3 tensor.
    Unlike pytorch-metric-learning's `TripletMarginMiner("semihard")`, which keeps every semi-hard
    triplet and drops pairs without one, this yields exactly one triplet per positive pair.

    Args:
        margin: width of the semi-hard band; use the triplet loss's margin (default 0.2).

    Raises:
        ValueError: if margin is negative.
    """

    def __init__(self, margin: float = 0.2) -> None:
        if margin < 0:
            raise ValueError(f"margin must be >= 0 (it is the width of the semi-hard band); got {margin}.")
        self.margin = margin

    def _mine(self, distances: Tensor, masks: PairMasks) -> TripletIndices:
        negative_distances, order = distances.masked_fill(~masks.negative, torch.inf).sort(dim=1, stable=True)
        # Per (a, j): position of a's first negative strictly farther than d(a, j).
        beyond = torch.searchsorted(negative_distances, distances.contiguous(), right=True)
        beyond = beyond.clamp_(max=distances.shape[1] - 1)
        candidate = negative_distances.gather(1, beyond)
        semihard = (candidate > distances) & (candidate < distances + self.margin)
        negative = torch.where(semihard, order.gather(1, beyond), order[:, :1])
        anchor, positive = (masks.positive & masks.negative.any(dim=1, keepdim=True)).nonzero(as_tuple=True)
        return TripletIndices(anchor=anchor, positive=positive, negative=negative[anchor, positive])
