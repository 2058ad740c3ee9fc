"""Duplicate groups: identical files (by content hash) and near-duplicates (by the embedding, at a threshold).

A near-duplicate group is a connected component of the kNN graph's edges scoring at least the
threshold, so a chain of near-copies is one group even where its ends score below it (what a
catalogue owner wants to see together). Each group keeps its first member (`keep`), so the group
CSV given to `index build --exclude` or `data.exclude` collapses each group to one image.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from tqdm import tqdm

from retrieval.audit.knn_graph import KnnGraph
from retrieval.runtime.files import file_sha256

__all__ = ["Groups", "exact_duplicate_groups", "near_duplicate_groups"]


@dataclass(frozen=True)
class Groups:
    """Rows grouped as copies of each other: `group (N,)` int64, -1 for a row in no group of two or more."""

    group: np.ndarray
    score: np.ndarray  # (N,) the row's best score to another member of its group (1.0 for identical files)

    @property
    def count(self) -> int:
        """Number of groups."""
        return int(self.group.max(initial=-1)) + 1

    def members(self) -> list[np.ndarray]:
        """Each group's rows, ascending; group g is `members()[g]`."""
        order = np.argsort(self.group, kind="stable")
        order = order[self.group[order] >= 0]
        return np.split(order, np.flatnonzero(np.diff(self.group[order])) + 1) if len(order) else []


def exact_duplicate_groups(paths: list[Path], progress: bool = True) -> Groups:
    """Files with the same sha256 (an unreadable file is in no group)."""
    by_hash: dict[str, list[int]] = defaultdict(list)
    for row, path in enumerate(tqdm(paths, desc="hashing", unit="file", disable=None if progress else True)):
        try:
            by_hash[file_sha256(path)].append(row)
        except OSError:
            continue
    group = np.full(len(paths), -1, dtype=np.int64)
    for number, rows in enumerate(rows for rows in by_hash.values() if len(rows) > 1):
        group[rows] = number
    return Groups(group, np.where(group >= 0, 1.0, np.nan))


def near_duplicate_groups(graph: KnnGraph, threshold: float) -> Groups:
    """Connected components of the graph's edges scoring >= `threshold`; components of one row are no group."""
    n = len(graph.neighbours)
    strong = graph.scores >= threshold
    rows = np.repeat(np.arange(n), graph.k)[strong.ravel()]
    cols = graph.neighbours.ravel()[strong.ravel()]
    # Scores shifted by +2 (> 0), so an edge seen from either end counts for both rows in the symmetric maximum.
    edges = coo_matrix((graph.scores[strong].astype(np.float64) + 2.0, (rows, cols)), shape=(n, n)).tocsr()
    edges = edges.maximum(edges.T)
    _, component = connected_components(edges, directed=False)
    in_group = np.bincount(component)[component] > 1
    # Number the groups 0.. in the order of their first row, so reports read top to bottom.
    _, first_rows = np.unique(component, return_index=True)
    number = np.full(component.max() + 1, -1, dtype=np.int64)
    grouped_firsts = np.sort(first_rows[in_group[first_rows]])
    number[component[grouped_firsts]] = np.arange(len(grouped_firsts))
    best = np.asarray(edges.max(axis=1).todense()).ravel() - 2.0
    return Groups(number[component], np.where(in_group, best, np.nan))
