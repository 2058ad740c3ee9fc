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
rows whose Recall@1 the leak hands over). `rows_with_copies` answers the embedding-threshold
question for `retrieval evaluate` from two embedding sets, without a graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from retrieval.audit.knn_graph import KnnGraph

__all__ = ["MAX_RATIO", "SPLIT_ORDER", "Leaks", "find_leaks", "rows_with_copies"]

SPLIT_ORDER = {"train": 0, "val": 1, "test": 2}  # a leak is reported on the row of the later split
# Default of the ratio rule, chosen on a validation half of the planted Fashion-MNIST set (docs/audit.md).
MAX_RATIO = 0.5
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


def find_leaks(copies: KnnGraph, nearest: np.ndarray, splits: list[str], max_ratio: float = MAX_RATIO) -> Leaks:
    """The leaks of the copy graph (rows padded with -1 where fewer neighbours were found).

    `nearest` is each row's nearest neighbour in the embedding's graph, for the headline share.
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
    share = float((leaked & (partner == nearest))[test].mean()) if test.any() else float("nan")
    return Leaks(partner, score, ratio, max_ratio, share)


def rows_with_copies(queries: np.ndarray, others: np.ndarray, threshold: float) -> np.ndarray:
    """`(Q,)` bool: the query rows whose most similar row of `others` (unit embeddings) scores >= `threshold`."""
    if len(others) == 0 or len(queries) == 0:
        return np.zeros(len(queries), dtype=bool)
    index = faiss.IndexFlatIP(others.shape[1])
    index.add(np.ascontiguousarray(others, dtype=np.float32))
    best, _ = index.search(np.ascontiguousarray(queries, dtype=np.float32), 1)
    return np.nan_to_num(best[:, 0], nan=-np.inf) >= threshold
