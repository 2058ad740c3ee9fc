"""The loss registry: config name -> class, and `build_loss` that checks parameters against it."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from retrieval.errors import UserError
from retrieval.losses.anchor import AnchorLoss
from retrieval.losses.arcface import ArcFaceLoss
from retrieval.losses.asymmetric_proxy import AsymmetricProxyLoss
from retrieval.losses.base import MetricLoss
from retrieval.losses.circle import CircleLoss
from retrieval.losses.class_weights import class_weights
from retrieval.losses.cosface import CosFaceLoss
from retrieval.losses.focal_proxy import FocalProxyLoss
from retrieval.losses.memory import CrossBatchMemory
from retrieval.losses.proxy_anchor import ProxyAnchorLoss
from retrieval.losses.proxy_nca import ProxyNCALoss
from retrieval.losses.proxy_softmax import ProxySoftmaxLoss
from retrieval.losses.triplet import TripletLoss

__all__ = ["LOSSES", "PAIR_LOSSES", "build_loss", "loss_parameters", "registry_name"]

LOSSES: dict[str, type[MetricLoss]] = {
    "proxy_nca": ProxyNCALoss,
    "anchor": AnchorLoss,
    "arcface": ArcFaceLoss,
    "cosface": CosFaceLoss,
    "focal_proxy": FocalProxyLoss,
    "asymmetric_proxy": AsymmetricProxyLoss,
    "proxy_anchor": ProxyAnchorLoss,
    "circle": CircleLoss,
    "triplet": TripletLoss,
}

# Losses over pairs inside the batch: they need P x K batches (data.sampler: pk). A view of the registry.
PAIR_LOSSES: frozenset[str] = frozenset(name for name, cls in LOSSES.items() if cls.needs_pk_batches)

# Filled in by the trainer from the data and model, never by the user.
_PROVIDED = ("num_classes", "embedding_dim")

# Parameters of every proxy-softmax loss beyond its constructor's: per-class weights from the
# training class counts (`retrieval.losses.class_weights`), set after construction.
_CLASS_WEIGHT_PARAMETERS = {"class_weights": "none", "beta": 0.999}

# Parameters of every pair loss beyond its constructor's: the size of a cross-batch memory
# (`retrieval.losses.CrossBatchMemory`, 0: none), wrapped around the loss after construction.
_MEMORY_PARAMETERS = {"memory_size": 0}


def loss_parameters(name: str) -> dict[str, Any]:
    """The user-settable parameters of loss `name` with their defaults."""
    cls = _loss_class(name)
    signature = inspect.signature(cls.__init__)
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    own = {
        key: param.default
        for key, param in signature.parameters.items()
        if param.kind in named and key not in ("self", *_PROVIDED)
    }
    if issubclass(cls, ProxySoftmaxLoss):
        return {**_CLASS_WEIGHT_PARAMETERS, **own}
    return {**_MEMORY_PARAMETERS, **own} if cls.needs_pk_batches else own


def build_loss(
    name: str,
    params: dict[str, Any],
    num_classes: int,
    embedding_dim: int,
    class_counts: np.ndarray | None = None,
) -> MetricLoss:
    """Build loss `name`; `params` are its constructor arguments, checked by the config loader.

    Args:
        name: a key of `LOSSES`.
        params: constructor arguments from the config (`loss.<parameter>`); proxy-softmax losses
            also take `class_weights` (none | inverse | effective_number) and `beta`, pair losses
            `memory_size` (> 0: wrapped in a `CrossBatchMemory` of that many embeddings).
        num_classes: number of training classes, passed to losses that hold proxies.
        embedding_dim: embedding size, passed to losses that hold proxies and to a memory.
        class_counts: `(num_classes,)` training images per class, needed when `class_weights` is not none.

    Raises:
        UserError: an unknown name, or parameters the loss refuses (`memory_size` on a proxy loss).
    """
    cls = _loss_class(name)
    wanted = inspect.signature(cls.__init__).parameters
    provided = {"num_classes": num_classes, "embedding_dim": embedding_dim}
    added = {**_CLASS_WEIGHT_PARAMETERS, **_MEMORY_PARAMETERS}
    own = {key: value for key, value in params.items() if key in wanted or key not in added}
    memory_size = params.get("memory_size", 0)
    try:
        loss = cls(**own, **{key: value for key, value in provided.items() if key in wanted})
        if memory_size:
            return _with_memory(loss, embedding_dim, memory_size)
        if isinstance(loss, ProxySoftmaxLoss):
            mode = params.get("class_weights", "none")
            if mode != "none" and class_counts is None:
                raise ValueError("class_weights needs the training class counts; pass class_counts")
            counts = class_counts if class_counts is not None else np.ones(num_classes)
            loss.set_class_weights(class_weights(counts, mode, params.get("beta", 0.999)))
    except ValueError as exc:  # a constructor's own check of its arguments, e.g. gamma <= 0
        raise UserError(f"loss {name!r}: {exc}") from exc
    return loss


def registry_name(loss: MetricLoss) -> str:
    """The `loss.name` of `loss`'s class in `LOSSES` (its class name when it is not registered).

    A `CrossBatchMemory` is named after the pair loss it wraps.
    """
    if isinstance(loss, CrossBatchMemory):
        loss = loss.loss
    return next((name for name, cls in LOSSES.items() if type(loss) is cls), type(loss).__name__)


def _with_memory(loss: MetricLoss, embedding_dim: int, memory_size: int) -> CrossBatchMemory:
    """`loss` with a cross-batch memory of `memory_size` embeddings (pair losses only)."""
    if not loss.needs_pk_batches:
        raise ValueError(f"memory_size applies to pair losses ({', '.join(sorted(PAIR_LOSSES))}), not to proxy losses")
    if memory_size < 0:
        raise ValueError(f"memory_size must be >= 0 (0: no memory), got {memory_size}")
    return CrossBatchMemory(loss, embedding_dim, memory_size)


def _loss_class(name: str) -> type[MetricLoss]:
    if name not in LOSSES:
        raise UserError(f"unknown loss.name {name!r}; valid names: {', '.join(sorted(LOSSES))}")
    return LOSSES[name]
