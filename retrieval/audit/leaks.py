"""Leaks: near-duplicates across train / val / test, which inflate every test figure the toolkit prints.

A pair of rows in different splits scoring at least the threshold is a leak of the later split's
row (test after val after train): that row is the one to drop from evaluation or re-split. The
headline is the share of test queries whose nearest neighbour is such a copy. `rows_with_copies`
answers the same question for `retrieval evaluate` from two embedding sets, without a graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import faiss
import numpy as np

from retrieval.audit.knn_graph import KnnGraph

__all__ = ["SPLIT_ORDER", "Leaks", "find_leaks", "rows_with_copies"]

SPLIT_ORDER = {"train": 0, "val": 1, "test": 2}  # a leak is reported on the row of the later split


@dataclass(frozen=True)
class Leaks:
    """Per row: its best-scoring neighbour in an earlier split (`partner`, -1: none seen) and that `score`."""

    partner: np.ndarray  # (N,) int64
    score: np.ndarray  # (N,) float64, -inf where no earlier-split row is among the neighbours
    threshold: float
    nearest_leak_share: float  # share of test rows whose nearest neighbour is an earlier-split copy (NaN: no test)

    @property
    def leaked(self) -> np.ndarray:
        """`(N,)` bool: rows with an earlier-split copy scoring at least the threshold."""
        return self.score >= self.threshold


def find_leaks(graph: KnnGraph, splits: list[str], threshold: float) -> Leaks:
    """The leaks of the graph's edges, seen from either end (a test row outside its train copy's k is still found)."""
    n = len(graph.neighbours)
    order = np.array([SPLIT_ORDER[split] for split in splits])
    first = np.repeat(np.arange(n), graph.k)
    second = graph.neighbours.ravel()
    scores = graph.scores.ravel().astype(np.float64)
    crossing = order[first] != order[second]
    first, second, scores = first[crossing], second[crossing], scores[crossing]
    later_first = order[first] > order[second]
    row = np.where(later_first, first, second)
    partner = np.where(later_first, second, first)
    best_score = np.full(n, -np.inf)
    best_partner = np.full(n, -1, dtype=np.int64)
    by_score = np.argsort(-scores, kind="stable")
    _, first_of_row = np.unique(row[by_score], return_index=True)
    chosen = by_score[first_of_row]
    best_score[row[chosen]] = scores[chosen]
    best_partner[row[chosen]] = partner[chosen]
    test = order == SPLIT_ORDER["test"]
    top = graph.neighbours[:, 0]
    nearest_is_copy = (order[top] < order) & (graph.scores[:, 0] >= threshold)
    share = float(nearest_is_copy[test].mean()) if test.any() else float("nan")
    return Leaks(best_partner, best_score, threshold, share)


def rows_with_copies(queries: np.ndarray, others: np.ndarray, threshold: float) -> np.ndarray:
    """`(Q,)` bool: the query rows whose most similar row of `others` (unit embeddings) scores >= `threshold`."""
    if len(others) == 0 or len(queries) == 0:
        return np.zeros(len(queries), dtype=bool)
    index = faiss.IndexFlatIP(others.shape[1])
    index.add(np.ascontiguousarray(others, dtype=np.float32))
    best, _ = index.search(np.ascontiguousarray(queries, dtype=np.float32), 1)
    return np.nan_to_num(best[:, 0], nan=-np.inf) >= threshold
