"""Losses for deep metric learning; `LOSSES` is the registry of config names and their classes.

Proxy losses (`ProxyNCALoss`, `AnchorLoss`, `ArcFaceLoss`, `ProxyAnchorLoss`, ...) own their
proxies and train on shuffled batches; pair losses (`PairLoss`: `CircleLoss`, `TripletLoss`, ...) need
P x K batches from `PKSampler`. Every loss takes raw embeddings `(B, D)` and labels `(B,)` (or
multi-hot `(B, K)` for `AsymmetricProxyLoss`) and returns a scalar; all of them are a
`MetricLoss`, the interface the trainer and the proxy classifier rely on. `CrossBatchMemory`
(`loss.memory_size`) lets a pair loss compare each batch with the embeddings of earlier ones.
`PMLLoss` / `PMLPairLoss` run any pytorch-metric-learning loss (`loss.name: pml.<ClassName>`);
`MultiSimilarityLoss`, `SupConLoss`, `ContrastiveLoss` and `SoftTripleLoss` are its registered presets.
"""

from retrieval.losses.anchor import AnchorLoss
from retrieval.losses.arcface import ArcFaceLoss
from retrieval.losses.asymmetric_proxy import AsymmetricProxyLoss
from retrieval.losses.base import MetricLoss, PairLoss
from retrieval.losses.circle import CircleLoss
from retrieval.losses.contrastive import ContrastiveLoss
from retrieval.losses.cosface import CosFaceLoss
from retrieval.losses.focal_proxy import FocalProxyLoss
from retrieval.losses.memory import CrossBatchMemory
from retrieval.losses.multi_similarity import MultiSimilarityLoss
from retrieval.losses.pml_adapter import PMLLoss, PMLPairLoss
from retrieval.losses.proxy_anchor import ProxyAnchorLoss
from retrieval.losses.proxy_nca import ProxyNCALoss
from retrieval.losses.registry import LOSSES, build_loss, pair_losses, registry_name
from retrieval.losses.soft_triple import SoftTripleLoss
from retrieval.losses.supcon import SupConLoss
from retrieval.losses.triplet import TripletLoss

__all__ = [
    "LOSSES",
    "AnchorLoss",
    "ArcFaceLoss",
    "AsymmetricProxyLoss",
    "CircleLoss",
    "ContrastiveLoss",
    "CosFaceLoss",
    "CrossBatchMemory",
    "FocalProxyLoss",
    "MetricLoss",
    "MultiSimilarityLoss",
    "PMLLoss",
    "PMLPairLoss",
    "PairLoss",
    "ProxyAnchorLoss",
    "ProxyNCALoss",
    "SoftTripleLoss",
    "SupConLoss",
    "TripletLoss",
    "build_loss",
    "pair_losses",
    "registry_name",
]
