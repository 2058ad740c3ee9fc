"""Every valid triplet of the batch."""

from torch import Tensor

from retrieval.miners.base import TripletMiner
from retrieval.miners.types import PairMasks, TripletIndices

__all__ = ["AllTripletsMiner"]


class AllTripletsMiner(TripletMiner):
    """All triplets (a, p, n) with y_a == y_p != y_n and a != p; distances are not looked at.

    With a P x K batch there are T = B * (K - 1) * (B - K) triplets, so memory grows as B^2 * K
    (three int64 indices per triplet), not B^3: the masks are expanded per positive pair, (B(K-1), B).
    At K = 4 that is about 3 B^2 triplets: 0.8 M at B = 512, 3.1 M at B = 1024, 12.6 M at B = 2048.
    """

    def _mine(self, distances: Tensor, masks: PairMasks) -> TripletIndices:
        anchor, positive = masks.positive.nonzero(as_tuple=True)
        pair, negative = masks.negative[anchor].nonzero(as_tuple=True)
        return TripletIndices(anchor=anchor[pair], positive=positive[pair], negative=negative)
