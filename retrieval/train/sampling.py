"""The training DataLoader: shuffled, class-balanced or P x K batches, split over the processes of a torchrun run.

Batch sizes are global (`data.batch_size`, `data.p` per optimizer step over all processes):
each of N processes loads 1/N of every step, so a config trains the same on any N.

The loader carries what the epoch loop must reset for an exact resume: its `generator` (reseed it
every epoch) and, where the order is planned per epoch, a sampler or batch sampler with
`set_epoch` (`EpochSampler`).
"""

from __future__ import annotations

import logging
from collections.abc import Sized
from typing import Protocol, cast, runtime_checkable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from retrieval.config import DataConfig
from retrieval.data import ImageLoader, PKSampler
from retrieval.data.balanced_sampler import balanced_sampler
from retrieval.errors import UserError
from retrieval.losses import MetricLoss, registry_name
from retrieval.runtime.distributed import DistributedContext

__all__ = [
    "SAMPLER_KINDS",
    "EpochSampler",
    "build_pk_sampler",
    "build_train_loader",
    "epoch_samplers",
    "fitting_p",
    "sampler_kind",
]

SAMPLER_KINDS = ("random", "balanced", "pk")
_log = logging.getLogger(__name__)


@runtime_checkable
class EpochSampler(Protocol):
    """A sampler whose order is planned per epoch (`PKSampler`, `DistributedSampler`)."""

    def set_epoch(self, epoch: int) -> None:
        """Plan the order of 0-based `epoch`."""
        ...


def epoch_samplers(loader: DataLoader) -> list[EpochSampler]:
    """The loader's sampler and batch sampler that plan their order per epoch (tell them every epoch)."""
    samplers: list[object] = [loader.sampler, loader.batch_sampler]
    return [sampler for sampler in samplers if isinstance(sampler, EpochSampler)]


def sampler_kind(requested: str, loss: MetricLoss) -> str:
    """`random`, `balanced` or `pk` for `data.sampler`; `auto` picks the PK sampler for pair losses, which need it.

    Raises:
        UserError: a pair loss (`loss.needs_pk_batches`) with another sampler than pk.
    """
    kind = requested if requested != "auto" else ("pk" if loss.needs_pk_batches else "random")
    if loss.needs_pk_batches and kind != "pk":
        raise UserError(
            f"loss {registry_name(loss)!r} compares images within a batch and needs P classes x K images per "
            f"batch; set data.sampler=pk (or auto) instead of {kind}"
        )
    return kind


def fitting_p(cfg: DataConfig, labels: np.ndarray, context: DistributedContext) -> DataConfig:
    """`cfg` with a P the training labels can fill, when `data.p` is the default the user never set.

    The default (32, the benchmark recipe) exceeds small datasets' classes (the digits demo has 10):
    P becomes the largest the PK sampler accepts, a multiple of the process count, and one line says so.
    A `data.p` the user set is kept, and refused by the sampler if it does not fit.
    """
    world = context.world_size
    if "p" in cfg.model_fields_set:
        return cfg
    fits = world * min(cfg.p // world, PKSampler.largest_p(labels, cfg.k, world))
    if fits == cfg.p or fits < 2 * world:  # it fits already, or nothing does: the sampler says why
        return cfg
    if context.is_main:
        classes = int((np.unique(np.asarray(labels), return_counts=True)[1] >= 2).sum())
        _log.info(
            "data.p=%d classes per batch: the default %d does not fit the training data (%d classes with at least "
            "2 images, data.k=%d); set data.p to choose",
            fits,
            cfg.p,
            classes,
            cfg.k,
        )
    return cfg.model_copy(update={"p": fits})


def build_pk_sampler(labels: np.ndarray, cfg: DataConfig, seed: int, context: DistributedContext) -> PKSampler:
    """P x K batches; under N processes `data.p` classes per step in all, p / N on each (one shared plan)."""
    if cfg.p % context.world_size:
        raise UserError(
            f"data.p={cfg.p} classes per step cannot be split over {context.world_size} processes; "
            f"use a multiple of {context.world_size}"
        )
    try:
        return PKSampler(
            labels, cfg.p // context.world_size, cfg.k, seed=seed, rank=context.rank, world_size=context.world_size
        )
    except ValueError as exc:
        raise UserError(f"PK sampler (data.p={cfg.p}, data.k={cfg.k}): {exc}") from exc


def build_train_loader(
    dataset: Dataset,
    labels: np.ndarray,
    kind: str,
    cfg: DataConfig,
    seed: int,
    context: DistributedContext,
    device: torch.device,
) -> DataLoader:
    """Batches of the training set for sampler `kind` (see `sampler_kind`), with a fresh `generator`.

    One process shuffles (or draws class-balanced) through the loader's `generator`; several use
    a `DistributedSampler` with `data.batch_size / N` images each. The PK sampler gives whole
    batches itself. Reseed `loader.generator` and tell `epoch_samplers(loader)` every epoch.

    Args:
        dataset: the training images, `(image, label)` items.
        labels: `(N,)` class of every item (the PK and balanced samplers plan with them).
        kind: `random`, `balanced` or `pk`.
        cfg: batch size, P and K, workers and pinned memory.
        seed: the PK plan's and the `DistributedSampler`'s seed.
        context: the process group.
        device: where the batches go (pinned memory only helps a GPU).

    Raises:
        UserError: the global batch does not split evenly over the processes, the balanced sampler
            under several processes, or a training set that does not fill one step.
    """
    size = len(cast(Sized, dataset))  # map-style datasets have a length
    generator = torch.Generator()
    common = {
        "num_workers": cfg.num_workers,
        "pin_memory": cfg.pin_memory and device.type == "cuda",
        "persistent_workers": cfg.persistent_workers and cfg.num_workers > 0,
        "generator": generator,
    }
    if kind == "pk":
        return ImageLoader(dataset, batch_sampler=build_pk_sampler(labels, cfg, seed, context), **common)
    sampler: Sampler | None = balanced_sampler(labels, generator) if kind == "balanced" else None
    if sampler is not None and context.enabled:
        raise UserError(f"data.sampler={cfg.sampler} runs in one process; use data.sampler=random or pk under torchrun")
    if not context.enabled:
        drop_last = size > cfg.batch_size
        order = {"shuffle": True} if sampler is None else {"sampler": sampler}
        return ImageLoader(dataset, batch_size=cfg.batch_size, drop_last=drop_last, **order, **common)
    if cfg.batch_size % context.world_size:
        raise UserError(
            f"data.batch_size={cfg.batch_size} images per step cannot be split over {context.world_size} "
            f"processes; use a multiple of {context.world_size}"
        )
    per_rank = cfg.batch_size // context.world_size
    distributed: DistributedSampler = DistributedSampler(dataset, context.world_size, context.rank, seed=seed)
    if len(distributed) < per_rank:
        raise UserError(
            f"{size} training images do not fill one step of data.batch_size={cfg.batch_size}; lower data.batch_size"
        )
    return ImageLoader(dataset, batch_size=per_rank, sampler=distributed, drop_last=True, **common)
