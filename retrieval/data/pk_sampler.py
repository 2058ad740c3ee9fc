"""P x K batch sampler for pair losses: every batch holds P distinct classes with K images each."""

import logging
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Sampler

__all__ = ["PKSampler"]

logger = logging.getLogger(__name__)


class PKSampler(Sampler[list[int]]):
    """Batch sampler yielding batches of exactly P distinct classes x K indices (pass as `batch_sampler`).

    Each class is walked in shuffled passes cut into groups of K distinct images. An epoch
    allocates every class one group, then the rest of its groups in proportion to n / K, and
    deals them out over its batches: every class appears in every epoch (when an epoch holds at
    least as many groups as there are classes) and every image is seen about once. A class with
    fewer than K images (but at least 2) gives all its images, filled up to K by sampling them
    with replacement. Classes with a single image cannot form a positive pair and are left out
    (logged once, at construction). Within a batch the K indices of a class are contiguous.

    The plan of an epoch depends only on (seed, epoch): call `set_epoch` before each epoch, and a
    resumed run replays the same batches. Under `torch.distributed` (or with explicit `rank` and
    `world_size`), all ranks compute the same plan of `world_size` batches per step and each takes
    its own, so within a step no two ranks share an index, except indices repeated to fill a
    short class (a class is used at most floor(n / K) times per step, once if n < K).

    Args:
        labels: class id of every dataset item (N,).
        p: classes per batch (P), at least 2 so that every batch has negatives.
        k: images per class per batch (K), at least 2 so that every class has a positive pair.
        batches_per_epoch: batches per rank and epoch; default: the images of the eligible classes
            (at least 2 images) // (P * K) // world_size.
        seed: base seed of the plan, >= 0.
        rank: this process's rank; default torch.distributed's when initialized, else 0.
        world_size: number of ranks; default torch.distributed's when initialized, else 1.

    Raises:
        ValueError: if labels is not 1-D, k < 2, p < 2, p exceeds the classes with at least 2
            images, one step cannot give every rank P disjoint classes, the epoch would hold no
            batch, or rank/world_size/seed are out of range.

    Example:
        >>> sampler = PKSampler([0, 0, 1, 1, 2, 2, 2], p=2, k=2)
        >>> [len(batch) for batch in sampler]
        [4]
    """

    def __init__(
        self,
        labels: Sequence[int] | np.ndarray | torch.Tensor,
        p: int,
        k: int,
        *,
        batches_per_epoch: int | None = None,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        labels_array = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
        if labels_array.ndim != 1:
            raise ValueError(f"labels must be 1-D, one class id per dataset item; got shape {labels_array.shape}.")
        if k < 2:
            raise ValueError(
                f"k={k}: each class needs at least 2 images per batch to form a positive pair; use k >= 2."
            )
        if p < 2:
            raise ValueError(f"p={p}: a batch needs at least 2 classes to have negatives; use p >= 2.")
        if seed < 0:
            raise ValueError(f"seed must be >= 0; got {seed}.")
        self.rank, self.world_size = _resolve_rank(rank, world_size)
        self.p, self.k, self.seed, self.epoch = p, k, seed, 0

        by_class = _indices_by_class(labels_array)
        self._class_indices = [indices for indices in by_class if len(indices) >= 2]
        singletons = len(by_class) - len(self._class_indices)
        if singletons:
            logger.warning(
                "PKSampler: left out %d classes with a single image (no positive pair possible).", singletons
            )
        num_classes = len(self._class_indices)
        if p > num_classes:
            raise ValueError(
                f"p={p} classes per batch, but only {num_classes} classes have at least 2 images; "
                f"use p <= {num_classes}."
            )
        sizes = np.array([len(indices) for indices in self._class_indices])
        # Groups a class can give to one step without repeating an image across ranks.
        self._step_capacity = np.minimum(np.maximum(sizes // k, 1), self.world_size)
        if self._step_capacity.sum() < p * self.world_size:
            raise ValueError(
                f"each step needs p * world_size = {p * self.world_size} groups of k={k} distinct images, but the "
                f"classes can give only {self._step_capacity.sum()} without two ranks sharing an image; "
                "lower p or k, or use fewer ranks."
            )
        self._class_sizes = sizes
        if batches_per_epoch is None:
            batches_per_epoch = int(sizes.sum()) // (p * k) // self.world_size
            if batches_per_epoch == 0:
                raise ValueError(
                    f"the {sizes.sum()} images of classes with at least 2 images do not fill one batch of "
                    f"p * k = {p * k} per rank ({self.world_size} ranks); lower p or k, or pass batches_per_epoch."
                )
        elif batches_per_epoch < 1:
            raise ValueError(f"batches_per_epoch must be >= 1; got {batches_per_epoch}.")
        self.batches_per_epoch = batches_per_epoch

    @staticmethod
    def largest_p(labels: Sequence[int] | np.ndarray, k: int, world_size: int = 1) -> int:
        """The largest P (per rank) the sampler accepts for `labels`, `k` and `world_size`; below 2: none.

        It is bounded by the classes with at least 2 images, by the groups of `k` distinct images one
        step can take from them without two ranks sharing an image, and by one batch per epoch.
        """
        sizes = np.array([len(indices) for indices in _indices_by_class(np.asarray(labels))], dtype=np.int64)
        sizes = sizes[sizes >= 2]
        capacity = int(np.minimum(np.maximum(sizes // k, 1), world_size).sum())
        return int(min(len(sizes), capacity // world_size, int(sizes.sum()) // (k * world_size)))

    def set_epoch(self, epoch: int) -> None:
        """Select the plan of `epoch` (>= 0); the same (seed, epoch) always gives the same batches."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0; got {epoch}.")
        self.epoch = epoch

    def __len__(self) -> int:
        """Batches per epoch on this rank."""
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[list[int]]:
        plan = _EpochPlan(self, np.random.default_rng([self.seed, self.epoch]))
        for _ in range(self.batches_per_epoch):
            yield plan.next_step()[self.rank]


class _EpochPlan:
    """The shared plan of one epoch, built step by step: `world_size` batches per step."""

    def __init__(self, sampler: PKSampler, rng: np.random.Generator) -> None:
        self._sampler = sampler
        self._rng = rng
        self._steps_left = sampler.batches_per_epoch
        # Groups each class still has to give this epoch, and the not yet visited images of its current pass.
        self._owed = self._allocate_epoch()
        self._unvisited = [indices[:0] for indices in sampler._class_indices]

    def next_step(self) -> list[list[int]]:
        """The batches of every rank for one step."""
        sampler = self._sampler
        counts = self._draw_group_counts()
        classes = np.flatnonzero(counts)
        self._rng.shuffle(classes)
        # One class's groups are consecutive and at most world_size long, so dealing slot i to
        # rank i % world_size gives every rank p distinct classes.
        slots = np.repeat(classes, counts[classes])
        batches: list[list[int]] = [[] for _ in range(sampler.world_size)]
        taken: dict[int, list[np.ndarray]] = {}
        for slot, cls in enumerate(slots.tolist()):
            group = self._draw_group(cls, taken.setdefault(cls, []))
            taken[cls].append(group)
            batches[slot % sampler.world_size].extend(group.tolist())
        return batches

    def _allocate_epoch(self) -> np.ndarray:
        """Groups per class for the epoch: one per class first, the rest in proportion to n / K - 1.

        The total is exactly the epoch's p * world_size * batches_per_epoch groups, and no class
        gets more than it can give in that many steps.
        """
        sampler = self._sampler
        total = sampler.p * sampler.world_size * sampler.batches_per_epoch
        sizes = sampler._class_sizes
        if total < len(sizes):
            owed = np.zeros_like(sizes)
            owed[self._rng.choice(len(sizes), size=total, replace=False, p=sizes / sizes.sum())] = 1
            return owed
        limit = sampler.batches_per_epoch * sampler._step_capacity
        beyond_first = np.maximum(sizes / sampler.k - 1, 0)
        owed = np.ones_like(sizes)
        while missing := total - int(owed.sum()):
            room = limit - owed
            weights = np.where(room > 0, beyond_first, 0.0)
            if not weights.any():
                weights = (room > 0).astype(float)
            owed += np.minimum(self._apportion(weights, missing), room)
        return owed

    def _apportion(self, weights: np.ndarray, total: int) -> np.ndarray:
        """Split `total` in proportion to `weights`, each share randomly rounded, shares summing to `total`."""
        edges = np.floor(np.concatenate([[0.0], np.cumsum(weights) * (total / weights.sum())]) + self._rng.random())
        return np.diff(edges).astype(np.int64)

    def _draw_group_counts(self) -> np.ndarray:
        """Groups per class for one step: p * world_size in all, within each class's step capacity.

        A class that owes as many groups as the remaining steps can take is drawn now, so the rest
        of the epoch always stays feasible.
        """
        sampler = self._sampler
        capacity = np.minimum(sampler._step_capacity, self._owed)
        counts = np.maximum(self._owed - (self._steps_left - 1) * sampler._step_capacity, 0)
        missing = sampler.p * sampler.world_size - int(counts.sum())
        while missing:
            weights = np.where(counts < capacity, self._owed - counts, 0)
            drawn = self._rng.choice(len(counts), size=missing, p=weights / weights.sum())
            accepted = np.minimum(counts + np.bincount(drawn, minlength=len(counts)), capacity)
            missing -= int((accepted - counts).sum())
            counts = accepted
        self._owed -= counts
        self._steps_left -= 1
        return counts

    def _draw_group(self, cls: int, taken: list[np.ndarray]) -> np.ndarray:
        """K indices of class `cls`, distinct from those it already gave to this step (`taken`)."""
        k = self._sampler.k
        images = self._sampler._class_indices[cls]
        if len(images) < k:
            return np.concatenate([self._rng.permutation(images), self._rng.choice(images, size=k - len(images))])
        unvisited = self._unvisited[cls]
        if len(unvisited) < k:
            # Finish this pass and start the next one, with this step's images put last.
            fresh = self._rng.permutation(images)
            in_step_images = np.concatenate([unvisited, *taken])
            if len(in_step_images):
                in_step = np.isin(fresh, in_step_images)
                fresh = np.concatenate([fresh[~in_step], fresh[in_step]])
            needed = k - len(unvisited)
            group, self._unvisited[cls] = np.concatenate([unvisited, fresh[:needed]]), fresh[needed:]
            return group
        group, self._unvisited[cls] = unvisited[:k], unvisited[k:]
        return group


def _resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size): the given values, else torch.distributed's when initialized, else (0, 1)."""
    distributed = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if distributed else 1
    if rank is None:
        rank = dist.get_rank() if distributed else 0
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"need world_size >= 1 and 0 <= rank < world_size; got rank={rank}, world_size={world_size}.")
    return rank, world_size


def _indices_by_class(labels: np.ndarray) -> list[np.ndarray]:
    """The dataset indices of each class (classes in sorted order), each in dataset order."""
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    return np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])
