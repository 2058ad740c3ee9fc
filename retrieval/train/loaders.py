"""The training DataLoader: shuffled or P x K batches, split over the processes of a torchrun run.

Batch sizes are global (`data.batch_size`, `data.p` per optimizer step over all processes):
each of N processes loads 1/N of every step, so a config trains the same on any N.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from retrieval.config import DataConfig
from retrieval.data import ImageLoader, PKSampler
from retrieval.errors import UserError
from retrieval.runtime.distributed import DistributedContext

__all__ = ["build_pk_sampler", "build_train_loader"]


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
    cfg: DataConfig,
    seed: int,
    context: DistributedContext,
    device: torch.device,
    generator: torch.Generator,
    pk_sampler: PKSampler | None = None,
    sampler: Sampler | None = None,
) -> DataLoader:
    """Batches of the training set.

    One process shuffles through `generator` (reseed it every epoch); several use a
    `DistributedSampler` (call its `set_epoch` every epoch) with `data.batch_size / N` images each.
    A `pk_sampler` gives the batches itself; another `sampler` (e.g. the class-balanced one) replaces
    the shuffle, in one process only.

    Raises:
        UserError: the global batch does not split evenly over the processes, or the training
            set does not fill one step.
    """
    common = {
        "num_workers": cfg.num_workers,
        "pin_memory": cfg.pin_memory and device.type == "cuda",
        "persistent_workers": cfg.persistent_workers and cfg.num_workers > 0,
        "generator": generator,
    }
    if pk_sampler is not None:
        return ImageLoader(dataset, batch_sampler=pk_sampler, **common)
    if sampler is not None and context.enabled:
        raise UserError(f"data.sampler={cfg.sampler} runs in one process; use data.sampler=random or pk under torchrun")
    if not context.enabled:
        drop_last = len(dataset) > cfg.batch_size
        order = {"shuffle": True} if sampler is None else {"sampler": sampler}
        return ImageLoader(dataset, batch_size=cfg.batch_size, drop_last=drop_last, **order, **common)
    if cfg.batch_size % context.world_size:
        raise UserError(
            f"data.batch_size={cfg.batch_size} images per step cannot be split over {context.world_size} "
            f"processes; use a multiple of {context.world_size}"
        )
    per_rank = cfg.batch_size // context.world_size
    sampler = DistributedSampler(dataset, context.world_size, context.rank, seed=seed)
    if len(sampler) < per_rank:
        raise UserError(
            f"{len(dataset)} training images do not fill one step of data.batch_size={cfg.batch_size}; "
            "lower data.batch_size"
        )
    return ImageLoader(dataset, batch_size=per_rank, sampler=sampler, drop_last=True, **common)
