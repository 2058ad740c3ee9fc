"""Losses for deep metric learning; `LOSSES` maps each config name to its class.

Proxy losses (`ProxyNCALoss`, `AnchorLoss`, ...) own their proxies and train on shuffled
batches; pair losses (`CircleLoss`, `TripletLoss`) need P x K batches from `PKSampler`.
Every loss takes raw embeddings `(B, D)` and labels `(B,)` and returns a scalar.
"""

from retrieval.losses.anchor import AnchorLoss
from retrieval.losses.circle import CircleLoss
from retrieval.losses.proxy_nca import ProxyNCALoss
from retrieval.losses.registry import LOSSES, PAIR_LOSSES, build_loss
from retrieval.losses.triplet import TripletLoss

__all__ = ["LOSSES", "PAIR_LOSSES", "AnchorLoss", "CircleLoss", "ProxyNCALoss", "TripletLoss", "build_loss"]
