"""Leaks: copies of an image across train / val / test, which inflate every test figure the toolkit prints.

Found on the copy check's graph (`copy_index.copy_graph`), not the embedding's: for each val or test
row, its most similar picture of an earlier split (test after val after train) is its partner, and
the pair is a copy when the partner is much nearer than the other earlier-split pictures, by Lowe's
ratio: the distance to the partner over the distance to the next earlier-split picture, at most
`MAX_RATIO` (copies of one image within the later split do not hide each other). Images showing
the same picture (`copy_index.CopyIndex.pictures`: identical files, among others) are one candidate, so an
image identical to several earlier ones is a copy of that picture at distance 0 (the first of them
its partner), and a near copy of a picture held several times is measured against the next other
picture, whatever the number of partners.
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

from retrieval.audit.copies import describe_images
from retrieval.audit.copy_index import copy_graph, copy_index
from retrieval.audit.knn_graph import EXACT_LIMIT, KnnGraph

__all__ = ["COPY_NEIGHBOURS", "MAX_RATIO", "SPLIT_ORDER", "Leaks", "copy_leaks", "find_leaks", "read_pictures"]

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


def find_leaks(
    copies: KnnGraph,
    nearest: np.ndarray | None,
    splits: list[str],
    max_ratio: float = MAX_RATIO,
    pictures: np.ndarray | None = None,
) -> Leaks:
    """The leaks of the copy graph (rows padded with -1 where fewer neighbours were found).

    `pictures` (`CopyIndex.pictures`, -1 unreadable) groups the rows showing one picture; the graph then holds
    one row per picture (its first row's), as `copy_index.copy_graph` builds it. None: every row its own picture.
    Only the graph rows of pictures shown by a val or test row are read (`read_pictures`).
    `nearest` is each row's nearest neighbour in the embedding's graph, for the headline share (None: no share).
    """
    n = len(splits)
    order = np.array([SPLIT_ORDER[split] for split in splits], dtype=np.int64)
    picture = np.arange(n) if pictures is None else np.asarray(pictures, dtype=np.int64)
    first_order, partner_of, shown_by = _pictures(picture, order)
    rows = np.arange(n)
    own = np.maximum(picture, 0)
    graph_row = np.where(picture >= 0, shown_by[own], rows)
    # Candidates: the row's own picture first (its identical images, at distance 0), then the graph's other pictures.
    neighbours = copies.neighbours[graph_row]
    candidate = np.column_stack([picture, np.where(neighbours >= 0, picture[np.maximum(neighbours, 0)], -1)])
    similarity = np.column_stack([np.ones(n), copies.scores[graph_row].astype(np.float64)])
    found = candidate >= 0
    earlier = found & (first_order[np.maximum(candidate, 0)] < order[:, None])
    has_partner = earlier.any(axis=1)
    place = earlier.argmax(axis=1)  # the first, most similar, earlier-split candidate
    distance = np.sqrt(np.clip(2.0 - 2.0 * similarity, 0.0, None))
    # The reference: the next earlier-split picture (other copies of the partner in later splits do not count
    # against it), else the farthest candidate seen, a lower bound of the next one's distance.
    later_earlier = earlier & (np.arange(candidate.shape[1]) > place[:, None])
    has_second = later_earlier.any(axis=1)
    last_found = np.maximum(found.sum(axis=1) - 1, 0)
    second = np.where(has_second, later_earlier.argmax(axis=1), last_found)
    reference = np.where(has_second | (last_found > place), distance[rows, second], _FARTHEST)
    to_partner = distance[rows, place]
    # Smoothed, so a picture at distance 0 from its partner and from other pictures too is no surer a copy.
    ratio = (to_partner + _EPSILON) / (reference + _EPSILON)
    partner = np.where(has_partner, partner_of[np.maximum(candidate[rows, place], 0)], -1)
    score = np.where(has_partner, similarity[rows, place], -np.inf)
    ratio = np.where(has_partner, ratio, np.inf)
    test = order == SPLIT_ORDER["test"]
    leaked = ratio <= max_ratio
    share = float("nan")
    if nearest is not None and test.any():  # the nearest neighbour shows the partner's picture
        same = picture[np.maximum(nearest, 0)] == picture[np.maximum(partner, 0)]
        share = float((leaked & same & (nearest >= 0))[test].mean())
    return Leaks(partner, score, ratio, max_ratio, share)


def _pictures(picture: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per picture id: its earliest split, that split's first row (a later image's partner), and its first row
    (whose graph row stands for it). Unreadable rows (-1) are in no picture."""
    count = int(picture.max(initial=-1)) + 1
    readable = np.flatnonzero(picture >= 0)
    first_order = np.full(count, len(SPLIT_ORDER), dtype=np.int64)
    np.minimum.at(first_order, picture[readable], order[readable])
    earliest = readable[order[readable] == first_order[picture[readable]]]
    partner_of = np.full(count, len(picture), dtype=np.int64)
    np.minimum.at(partner_of, picture[earliest], earliest)
    shown_by = np.full(count, len(picture), dtype=np.int64)
    np.minimum.at(shown_by, picture[readable], readable)
    return first_order, partner_of, shown_by


def read_pictures(pictures: np.ndarray, splits: list[str]) -> np.ndarray:
    """The pictures whose graph rows `find_leaks` reads: those a val or test row shows (a training row has no
    earlier split to copy), ascending."""
    later = np.array([SPLIT_ORDER[split] > 0 for split in splits], dtype=bool)
    return np.unique(pictures[later & (pictures >= 0)])


def copy_leaks(
    paths: list[Path],
    splits: list[str],
    nearest: np.ndarray | None = None,
    max_ratio: float = MAX_RATIO,
    progress: bool = True,
    exact_limit: int = EXACT_LIMIT,
) -> Leaks:
    """The leaks among image files by the copy check: what `retrieval audit` reports and `evaluate --exclude-leaks`
    leaves out (`nearest` as for `find_leaks`; `exact_limit` as for `copy_index.copy_index`)."""
    k = min(COPY_NEIGHBOURS, max(len(paths) - 1, 1))
    index = copy_index(describe_images(paths, progress), exact_limit)
    graph, pictures = copy_graph(index, k, read_pictures(index.pictures, splits)), index.pictures
    del index  # the descriptors (most of the audit's memory at scale) are not needed by the ratio rule
    return find_leaks(graph, nearest, splits, max_ratio, pictures)
