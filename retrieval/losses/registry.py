"""`build_loss`: a `loss.name` of the registry built with its parameters checked against its constructor.

`LOSSES` is the torch-free registry `retrieval.choices.losses.LOSSES` (built-ins, `@LOSSES.register`,
the `retrieval.losses` entry points), which the config checks a name against before PyTorch loads.

Besides the registered names, `pml.<ClassName>` builds any pytorch-metric-learning loss through
`retrieval.losses.pml_adapter`, with its constructor's arguments in `loss.kwargs` and an optional
PML miner in `loss.miner`.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from retrieval.choices.losses import LOSSES, PML_PREFIX
from retrieval.errors import UserError
from retrieval.losses.base import MetricLoss
from retrieval.losses.class_weights import class_weights
from retrieval.losses.memory import CrossBatchMemory
from retrieval.losses.pml_adapter import (
    PMLLoss,
    PMLPairLoss,
    build_pml_loss,
    check_pml_parameters,
    is_pml_name,
    pml_adapter_class,
    pml_loss_class,
)
from retrieval.losses.proxy_softmax import ProxySoftmaxLoss

__all__ = [
    "LOSSES",
    "build_loss",
    "canonical_loss_name",
    "check_loss_parameters",
    "loss_parameters",
    "pair_losses",
    "registry_name",
]


def pair_losses() -> frozenset[str]:
    """The registered losses over pairs inside the batch: they need P x K batches (data.sampler: pk)."""
    return frozenset(name for name, cls in LOSSES.items() if _checked(name, cls).needs_pk_batches)


# Filled in by the trainer from the data and model, never by the user.
_PROVIDED = ("num_classes", "embedding_dim")

# Parameters of every proxy-softmax loss beyond its constructor's: per-class weights from the
# training class counts (`retrieval.losses.class_weights`), set after construction.
_CLASS_WEIGHT_PARAMETERS = {"class_weights": "none", "beta": 0.999}

# Parameters of every pair loss beyond its constructor's: the size of a cross-batch memory
# (`retrieval.losses.CrossBatchMemory`, 0: none), wrapped around the loss after construction.
_MEMORY_PARAMETERS = {"memory_size": 0}


# Parameters of a `pml.<ClassName>` loss: the PML constructor's arguments and an optional PML miner.
# A loss's parameters are its constructor's keyword arguments (a plain dict, passed on as `**params`):
# the config types each by its default's type when it reads it (`retrieval.config._build_loss_section`).
_PML_PARAMETERS: dict[str, Any] = {"kwargs": {}, "miner": None}


def canonical_loss_name(name: str) -> str:
    """`name` as the config stores it: a bare PML class name (`SupConLoss`) becomes `pml.SupConLoss`."""
    if name in LOSSES or is_pml_name(name):
        return name
    try:
        pml_loss_class(PML_PREFIX + name)
    except UserError:
        return name  # not PML's either: `loss_parameters` says what exists
    return PML_PREFIX + name


def loss_parameters(name: str) -> dict[str, Any]:
    """The user-settable parameters of loss `name` with their defaults."""
    if is_pml_name(name):
        pair = pml_adapter_class(name).needs_pk_batches
        return {**_PML_PARAMETERS, **(_MEMORY_PARAMETERS if pair else {})}
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
        name: a key of `LOSSES`, or `pml.<ClassName>` (see `retrieval.losses.pml_adapter`).
        params: constructor arguments from the config (`loss.<parameter>`); proxy-softmax losses
            also take `class_weights` (none | inverse | effective_number) and `beta`, pair losses
            `memory_size` (> 0: wrapped in a `CrossBatchMemory` of that many embeddings), `pml.` losses
            `kwargs` (the PML constructor's arguments) and `miner` (null, `pml.<Miner>` or {name, kwargs}).
        num_classes: number of training classes, passed to losses that hold proxies.
        embedding_dim: embedding size, passed to losses that hold proxies and to a memory.
        class_counts: `(num_classes,)` training images per class, needed when `class_weights` is not none.

    Raises:
        UserError: an unknown name, or parameters the loss refuses (`memory_size` on a proxy loss).
    """
    memory_size = params.get("memory_size", 0)
    if is_pml_name(name):
        adapter = build_pml_loss(name, params.get("kwargs") or {}, params.get("miner"), num_classes, embedding_dim)
        try:
            return _with_memory(adapter, embedding_dim, memory_size) if memory_size else adapter
        except ValueError as exc:
            raise UserError(f"loss {name!r}: {exc}") from exc
    cls = _loss_class(name)
    wanted = inspect.signature(cls.__init__).parameters
    provided = {"num_classes": num_classes, "embedding_dim": embedding_dim}
    added = {**_CLASS_WEIGHT_PARAMETERS, **_MEMORY_PARAMETERS}
    own = {key: value for key, value in params.items() if key in wanted or key not in added}
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

    A `CrossBatchMemory` is named after the pair loss it wraps, a PML loss built by class name `pml.<ClassName>`.
    """
    if isinstance(loss, CrossBatchMemory):
        loss = loss.loss
    if isinstance(loss, PMLLoss) and type(loss) in (PMLLoss, PMLPairLoss):
        return loss.pml_name
    return next((name for name, cls in LOSSES.items() if type(loss) is cls), type(loss).__name__)


def _with_memory(loss: MetricLoss, embedding_dim: int, memory_size: int) -> CrossBatchMemory:
    """`loss` with a cross-batch memory of `memory_size` embeddings (pair losses only)."""
    if not loss.needs_pk_batches:
        raise ValueError(
            f"memory_size applies to pair losses ({', '.join(sorted(pair_losses()))}), not to proxy losses"
        )
    if memory_size < 0:
        raise ValueError(f"memory_size must be >= 0 (0: no memory), got {memory_size}")
    if isinstance(loss, PMLLoss) and not loss.supports_memory:
        raise ValueError(
            f"pytorch-metric-learning's cross-batch memory does not take {loss.pml_name} (it compares the batch with "
            "itself only); set loss.memory_size=0"
        )
    return CrossBatchMemory(loss, embedding_dim, memory_size)


def check_loss_parameters(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """`params` once checked for what the constructors check only when the loss is built or runs.

    That is `kwargs` and `miner` of a `pml.` loss, returned typed like the PML arguments' defaults
    (`check_pml_parameters`); the registered losses' parameters are typed by the config already.

    Raises:
        UserError: an unknown PML class or argument, a missing required one, a value of the wrong type,
            a number that is not finite, a value PML refuses, or a cross-batch memory for a PML loss that
            PML's memory does not take.
    """
    if not is_pml_name(name):
        return params
    kwargs, miner = check_pml_parameters(name, params.get("kwargs"), params.get("miner"))
    params = {**params, "kwargs": kwargs, "miner": miner}
    if params.get("memory_size"):
        build_loss(name, params, num_classes=2, embedding_dim=4)
    return params


def _loss_class(name: str) -> type[MetricLoss]:
    """The class registered as `name`.

    Raises:
        UserError: `name` is unknown (the message lists the valid names), or its entry point fails to load.
    """
    return _checked(name, LOSSES.get(name))


def _checked(name: str, cls: type) -> type[MetricLoss]:
    """`cls`, refused unless it is a `MetricLoss` (a registered object is only known to be a class)."""
    if not issubclass(cls, MetricLoss):
        raise UserError(f"loss.name {name!r} is registered as {cls.__module__}.{cls.__qualname__}, not a MetricLoss")
    return cls
