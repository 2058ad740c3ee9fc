"""Leaks: copies of an image across train / val / test, which inflate every test figure the toolkit prints.

Found on the copy check's graph (`copies.copy_graph`), not the embedding's: for each val or test
row, its most similar image of an earlier split (test after val after train) is its partner, and
the pair is a copy when the partner is much nearer than the other earlier-split images, by Lowe's
ratio: the distance to the partner over the distance to the next earlier-split image, at most
`MAX_RATIO` (copies of one image within the later split do not hide each other).
A fixed similarity cannot tell a copy from a look-alike of the same class (a plain trouser has
many), a ratio can: the planted copies score a median 0.1, distinct images rarely below 0.6. The
leak is reported on the later split's row, the one to drop from evaluation or re-split. The
headline is the share of test rows whose nearest neighbour in the embedding is their copy (the
rows whose Recall@1 the leak hands over). `copy_leaks` runs the check from image files for `retrieval audit`
and `retrieval evaluate --exclude-leaks` alike, so the two commands flag the same test images.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from retrieval.audit.copies import copy_descriptors, copy_graph
from retrieval.audit.knn_graph import KnnGraph

__all__ = ["COPY_NEIGHBOURS", "MAX_RATIO", "SPLIT_ORDER", "Leaks", "copy_leaks", "find_leaks"]

SPLIT_ORDER = {"train": 0, "val": 1, "test": 2}  # a leak is reported on the row of the later split
# Default of the ratio rule, chosen on a validation half of the planted Fashion-MNIST set (docs/audit.md).
MAX_RATIO = 0.5
COPY_NEIGHBOURS = 10  # images of the copy graph per row; the ratio's reference is among them
_EPSILON = 1e-6  # distance below which two descriptors are the same picture
_FARTHEST = 2.0  # distance of unit vectors pointing apart: the reference of a row with no other neighbour


@dataclass(frozen=True)
class Leaks:
    """Per row: its most similar image of an earlier split (`partner`, -1: none seen), their cosine and ratio."""

    partner: np.ndarray  # (N,) int64
    score: np.ndarray  # (N,) float64 the copy descriptors' cosine, -inf without a partner
    ratio: np.ndarray  # (N,) float64 distance to the partner / to the next earlier-split image, inf: no partner
    max_ratio: float
    nearest_leak_share: float  # share of test rows whose embedding's nearest neighbour is their copy (NaN: no test)

    @property
    def leaked(self) -> np.ndarray:
        """`(N,)` bool: rows whose earlier-split partner is a copy by the ratio rule."""
        return self.ratio <= self.max_ratio


def find_leaks(copies: KnnGraph, nearest: np.ndarray | None, splits: list[str], max_ratio: float = MAX_RATIO) -> Leaks:
    """The leaks of the copy graph (rows padded with -1 where fewer neighbours were found).

    `nearest` is each row's nearest neighbour in the embedding's graph, for the headline share (None: no share).
    """
    n = len(copies.neighbours)
    order = np.array([SPLIT_ORDER[split] for split in splits])
    found = copies.neighbours >= 0
    earlier = found & (order[np.maximum(copies.neighbours, 0)] < order[:, None])
    has_partner = earlier.any(axis=1)
    place = earlier.argmax(axis=1)  # the first, most similar, earlier-split neighbour
    rows = np.arange(n)
    distance = np.sqrt(np.clip(2.0 - 2.0 * copies.scores.astype(np.float64), 0.0, None))
    # The reference: the next earlier-split neighbour (other copies of the partner in later splits do not count
    # against it), else the farthest neighbour seen, a lower bound of the next one's distance.
    later_earlier = earlier & (np.arange(copies.k) > place[:, None])
    has_second = later_earlier.any(axis=1)
    last_found = np.maximum(found.sum(axis=1) - 1, 0)
    second = np.where(has_second, later_earlier.argmax(axis=1), last_found)
    reference = np.where(has_second | (last_found > place), distance[rows, second], _FARTHEST)
    to_partner = distance[rows, place]
    # Smoothed, so an image identical to its partner and to other images too (a flat colour) is no surer a copy.
    ratio = (to_partner + _EPSILON) / (reference + _EPSILON)
    partner = np.where(has_partner, copies.neighbours[rows, place], -1)
    score = np.where(has_partner, copies.scores[rows, place].astype(np.float64), -np.inf)
    ratio = np.where(has_partner, ratio, np.inf)
    test = order == SPLIT_ORDER["test"]
    leaked = ratio <= max_ratio
    share = float("nan") if nearest is None or not test.any() else float((leaked & (partner == nearest))[test].mean())
    return Leaks(partner, score, ratio, max_ratio, share)


def copy_leaks(
    paths: list[Path],
    splits: list[str],
    nearest: np.ndarray | None = None,
    max_ratio: float = MAX_RATIO,
    progress: bool = True,
) -> Leaks:
    """The leaks among image files by the copy check: what `retrieval audit` reports and `evaluate --exclude-leaks`
    leaves out (`nearest` as for `find_leaks`)."""
    k = min(COPY_NEIGHBOURS, max(len(paths) - 1, 1))
    return find_leaks(copy_graph(copy_descriptors(paths, progress), len(paths), k), nearest, splits, max_ratio)
