"""The sample phase of a build: which rows train FAISS, which are held out as queries, which tuning checks.

All three are drawn from one seeded generator, in this order, so a build of the same rows draws the
same sample whatever the chunk size; one pass over the stream gathers them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from retrieval.index.choice import IndexPlan
from retrieval.index.streaming import UnitChunks, gather_rows
from retrieval.index.tuning import TUNING_QUERIES

__all__ = ["SEED", "TRAINING_CAP", "Sample", "draw_sample", "training_rows"]

SEED = 0
TRAINING_CAP = 262144  # k-means on more vectors than this barely moves the centroids


def training_rows(n: int, plan: IndexPlan, rng: np.random.Generator) -> np.ndarray:
    """Sorted positions of the rows FAISS trains `plan`'s quantizers on: max(its minimum, TRAINING_CAP), at most N."""
    return np.sort(rng.choice(n, size=min(n, max(plan.min_training_vectors, TRAINING_CAP)), replace=False))


@dataclass(frozen=True)
class Sample:
    """Row positions a build reads before adding, and their unit vectors once gathered.

    Attributes:
        held_out: sorted positions of the queries held out of the index while it is measured and
            tuned (added last); empty with given tuning queries or a shard.
        training: sorted positions of FAISS's training sample; empty for exact kinds and shards.
        checked: positions of stored vectors that tuning requires to find themselves first.
    """

    held_out: np.ndarray
    training: np.ndarray
    checked: np.ndarray
    held_vectors: np.ndarray
    training_vectors: np.ndarray
    checked_vectors: np.ndarray


def draw_sample(
    reader: UnitChunks,
    n: int,
    dim: int,
    plan: IndexPlan,
    *,
    hold_out: bool,
    train: bool,
    check: bool,
    progress: bool,
) -> Sample:
    """Draw the positions (seed `SEED`) and gather their rows in one pass over `reader` (none when nothing is drawn).

    Args:
        hold_out: hold out up to `TUNING_QUERIES` rows (a tenth of N at most) as queries.
        train: draw FAISS's training sample.
        check: draw up to `TUNING_QUERIES` stored rows for tuning's self-recall check.
    """
    rng = np.random.default_rng(SEED)
    empty = np.zeros(0, dtype=np.int64)
    held_out = np.sort(rng.choice(n, size=min(TUNING_QUERIES, n // 10), replace=False)) if hold_out else empty
    training = training_rows(n, plan, rng) if train else empty
    checked = empty
    if check:
        inserted = np.setdiff1d(np.arange(n, dtype=np.int64), held_out, assume_unique=True)
        checked = rng.choice(inserted, size=min(TUNING_QUERIES, len(inserted)), replace=False)
    wanted = np.concatenate([held_out, training, checked])
    chunks = reader.read("sampling", progress) if len(wanted) else iter(())  # a shard samples nothing
    gathered = gather_rows(chunks, wanted, dim)
    held, trained, checked_vectors = np.split(gathered, [len(held_out), len(held_out) + len(training)])
    return Sample(held_out, training, checked, held, trained, checked_vectors)
