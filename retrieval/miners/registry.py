"""The registry of triplet miners a config can name (`loss.miner` of the triplet loss).

An entry is a `TripletMiner` class; `build_miner` passes it the triplet margin when its constructor
takes `margin` (the semi-hard band does). A new miner is one module with `@MINERS.register("name")`
on its class, or a `retrieval.miners` entry point (`docs/extending.md`).
"""

from __future__ import annotations

import inspect

from retrieval.miners.base import TripletMiner
from retrieval.registry import Registry

__all__ = ["MINERS", "build_miner"]

MINERS: Registry[type[TripletMiner]] = Registry(
    "miner",
    "retrieval.miners",
    {
        "all": "retrieval.miners.all_triplets:AllTripletsMiner",
        "batch_hard": "retrieval.miners.batch_hard:BatchHardMiner",
        "semihard": "retrieval.miners.semihard:SemiHardMiner",
    },
    accepts=lambda obj: isinstance(obj, type) and issubclass(obj, TripletMiner),
    expected="a TripletMiner class",
)


def build_miner(name: str, margin: float) -> TripletMiner:
    """Build the miner registered under `name`.

    Args:
        name: a name of `MINERS`: "all", "batch_hard", "semihard", or one registered.
        margin: the triplet loss's margin, given to a miner whose constructor takes `margin`.

    Raises:
        UserError: (a `ValueError`) `name` is not registered; the message lists the valid names.
    """
    cls = MINERS.get(name)
    takes_margin = "margin" in inspect.signature(cls).parameters
    return cls(margin=margin) if takes_margin else cls()  # type: ignore[call-arg]  # the signature says it takes it
