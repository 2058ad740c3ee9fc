"""Triplet miners: pick (anchor, positive, negative) indices from a batch's distance matrix.

`MINERS` is the registry of config names and their classes; `build_miner(name, margin)` builds one.
"""

from retrieval.miners.all_triplets import AllTripletsMiner
from retrieval.miners.base import TripletMiner
from retrieval.miners.batch_hard import BatchHardMiner
from retrieval.miners.masks import check_pairwise, pair_masks
from retrieval.miners.registry import MINERS, build_miner
from retrieval.miners.semihard import SemiHardMiner
from retrieval.miners.types import PairMasks, TripletIndices

__all__ = [
    "MINERS",
    "AllTripletsMiner",
    "BatchHardMiner",
    "PairMasks",
    "SemiHardMiner",
    "TripletIndices",
    "TripletMiner",
    "build_miner",
    "check_pairwise",
    "pair_masks",
]
