"""The triplet miners a config can name."""

from collections.abc import Callable

from retrieval.miners.all_triplets import AllTripletsMiner
from retrieval.miners.base import TripletMiner
from retrieval.miners.batch_hard import BatchHardMiner
from retrieval.miners.semihard import SemiHardMiner

__all__ = ["MINERS", "build_miner"]

# name -> factory taking the triplet margin (only the semi-hard band uses it).
MINERS: dict[str, Callable[[float], TripletMiner]] = {
    "all": lambda margin: AllTripletsMiner(),
    "batch_hard": lambda margin: BatchHardMiner(),
    "semihard": lambda margin: SemiHardMiner(margin=margin),
}


def build_miner(name: str, margin: float) -> TripletMiner:
    """Build the miner registered under `name`.

    Args:
        name: a key of `MINERS`: "all", "batch_hard" or "semihard".
        margin: the triplet loss's margin.

    Raises:
        ValueError: if `name` is not registered.
    """
    if name not in MINERS:
        raise ValueError(f"unknown miner {name!r}; valid names: {', '.join(sorted(MINERS))}.")
    return MINERS[name](margin)
