"""Pair-level verification: "are these two images of the same class?" decided by a score threshold.

Every pair of a split's images is scored by the inner product of their embeddings (a cosine
for unit embeddings). A pair of the same class is *genuine*, any other an *impostor*. At a
threshold t a pair matches when its score is >= t; the false match rate FMR(t) is the share of
impostor pairs that match and the false non-match rate FNMR(t) the share of genuine pairs that
do not. ROC curves and AUC come from scikit-learn (`roc_curve`, `roc_auc_score`).

Pairs: every unordered pair of distinct images; with a query/gallery protocol, every (query,
gallery) pair of distinct images. When there are more than `MAX_PAIRS`, a uniform random sample
of `MAX_PAIRS` of them (drawn with replacement, seeded) stands for the whole, and says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from retrieval.errors import UserError
from retrieval.metrics._inputs import ArrayLike, as_embeddings, as_label_codes, as_mask

__all__ = [
    "FMR_TARGETS",
    "MAX_PAIRS",
    "OperatingPoint",
    "Pairs",
    "fmr_text",
    "pairs_of",
    "rates_at",
    "roc_auc",
    "threshold_at_fmr",
]

FMR_TARGETS = (1e-2, 1e-3, 1e-4)  # the false match rates verification reports
MAX_PAIRS = 5_000_000  # all pairs up to this many (a 3,162-image split); a uniform sample of this many beyond
_BLOCK_ROWS = 1024  # query rows scored at a time (one matrix product) when enumerating all pairs
_CHUNK = 65536  # sampled pairs scored at a time: bounded (chunk, D) temporaries


@dataclass(frozen=True)
class Pairs:
    """Scored pairs of a split's images."""

    scores: np.ndarray  # (P,) float64 inner products of the two embeddings
    genuine: np.ndarray  # (P,) bool: the two images share a class (a label, for multi-label data)
    total: int  # pairs in the split: P when every pair is scored, more when `sampled`
    sampled: bool  # the P pairs are a uniform random sample of the `total`

    @property
    def num_genuine(self) -> int:
        return int(self.genuine.sum())

    @property
    def num_impostor(self) -> int:
        return int(len(self.genuine) - self.genuine.sum())


@dataclass(frozen=True)
class OperatingPoint:
    """A threshold and the error rates it gives on the pairs it was chosen on."""

    target_fmr: float  # the FMR the threshold was chosen for
    threshold: float  # a pair matches when its score is >= threshold
    fmr: float  # false match rate at the threshold (<= target_fmr)
    fnmr: float  # false non-match rate at the threshold


def pairs_of(
    embeddings: ArrayLike,
    labels: ArrayLike,
    query_mask: ArrayLike | None = None,
    gallery_mask: ArrayLike | None = None,
    max_pairs: int = MAX_PAIRS,
    seed: int = 0,
) -> Pairs:
    """Score the pairs of a split (see the module docstring for which pairs).

    Args:
        embeddings: `(N, D)` embeddings, unit rows for cosine scores.
        labels: `(N,)` class ids, or `(N, C)` multi-hot rows (genuine: at least one shared label).
        query_mask: `(N,)` bool, the queries of a query/gallery protocol; None with `gallery_mask`
            None: every unordered pair.
        gallery_mask: `(N,)` bool, the gallery of that protocol.
        max_pairs: score every pair up to this many, else a uniform sample of this many.
        seed: of the sample.

    Raises:
        UserError: the pairs are all genuine or all impostors (no rate can be measured).
    """
    matrix = as_embeddings(embeddings).astype(np.float64)
    codes = as_label_codes(labels, len(matrix))
    symmetric = query_mask is None and gallery_mask is None
    queries = np.flatnonzero(as_mask(query_mask, len(matrix), "query_mask"))
    gallery = np.flatnonzero(as_mask(gallery_mask, len(matrix), "gallery_mask"))
    if symmetric:
        total = len(matrix) * (len(matrix) - 1) // 2
    else:
        total = len(queries) * len(gallery) - len(np.intersect1d(queries, gallery))
    if total <= max_pairs:
        first, second, scores = _all_pairs(matrix, queries, gallery, symmetric)
    else:
        first, second = _sampled_pairs(queries, gallery, max_pairs, np.random.default_rng(seed))
        scores = _chunked(lambda a, b: np.einsum("pd,pd->p", matrix[a], matrix[b]), first, second)
    pairs = Pairs(scores, _same_class(codes, first, second), total, total > max_pairs)
    if pairs.num_genuine == 0 or pairs.num_impostor == 0:
        kind = "same-class" if pairs.num_genuine == 0 else "different-class"
        raise UserError(
            f"verification needs same-class and different-class pairs, and the {len(scores)} pairs have no "
            f"{kind} pair; use a split with at least two classes and two images of one class"
        )
    return pairs


def _all_pairs(
    matrix: np.ndarray, queries: np.ndarray, gallery: np.ndarray, symmetric: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(first, second, scores)` of every pair: rows i < j when `symmetric`, else query x gallery with i != j.

    One `(block, G)` matrix product per block of query rows.
    """
    firsts, seconds, scores = [], [], []
    gallery_rows = matrix[gallery]
    for start in range(0, len(queries), _BLOCK_ROWS):
        rows = queries[start : start + _BLOCK_ROWS]
        keep = rows[:, None] < gallery[None, :] if symmetric else rows[:, None] != gallery[None, :]
        row_index, column_index = np.nonzero(keep)
        firsts.append(rows[row_index])
        seconds.append(gallery[column_index])
        scores.append((matrix[rows] @ gallery_rows.T)[row_index, column_index])
    return np.concatenate(firsts), np.concatenate(seconds), np.concatenate(scores)


def _chunked(
    score: Callable[[np.ndarray, np.ndarray], np.ndarray], first: np.ndarray, second: np.ndarray
) -> np.ndarray:
    """`score(first, second)` computed `_CHUNK` pairs at a time and concatenated."""
    parts = [
        score(first[start : start + _CHUNK], second[start : start + _CHUNK]) for start in range(0, len(first), _CHUNK)
    ]
    return np.concatenate(parts) if parts else np.zeros(0)


def _sampled_pairs(
    queries: np.ndarray, gallery: np.ndarray, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """About `count` pairs drawn uniformly (query, gallery) with replacement; pairs of an image with itself dropped.

    Uniform over ordered pairs of distinct images is uniform over unordered ones too.
    """
    first, second = rng.choice(queries, size=count), rng.choice(gallery, size=count)
    distinct = first != second
    return first[distinct], second[distinct]


def _same_class(codes: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Whether each pair shares a class: equal codes, or a common bit of packed multi-hot rows."""
    if codes.ndim == 1:
        return codes[first] == codes[second]
    return _chunked(lambda a, b: (codes[a] & codes[b]).any(axis=1), first, second).astype(bool)


def roc_auc(pairs: Pairs) -> float:
    """Area under the ROC curve: the chance that a random genuine pair outscores a random impostor pair."""
    return float(roc_auc_score(pairs.genuine, pairs.scores))


def threshold_at_fmr(pairs: Pairs, target_fmr: float) -> OperatingPoint:
    """The lowest threshold whose FMR on `pairs` is at most `target_fmr`: the fewest false non-matches it allows.

    When even the highest-scoring pairs include an impostor beyond the target, the threshold lies
    just above the highest score: nothing matches (FNMR 1).

    Raises:
        UserError: `target_fmr` is not in (0, 1).
    """
    if not 0 < target_fmr < 1:
        raise UserError(f"a false match rate must lie in (0, 1), like 1e-3, got {target_fmr}")
    fpr, tpr, thresholds = roc_curve(pairs.genuine, pairs.scores, drop_intermediate=False)
    point = int(np.searchsorted(fpr, target_fmr, side="right")) - 1  # fpr rises with falling thresholds
    if point == 0:  # scikit-learn's first point is "nothing matches" (a threshold above every score)
        return OperatingPoint(target_fmr, float(np.nextafter(pairs.scores.max(), np.inf)), 0.0, 1.0)
    return OperatingPoint(target_fmr, float(thresholds[point]), float(fpr[point]), float(1 - tpr[point]))


def rates_at(pairs: Pairs, threshold: float) -> tuple[float, float]:
    """`(FMR, FNMR)` of `pairs` at `threshold` (a pair matches when its score is >= threshold)."""
    matches = pairs.scores >= threshold
    return float(matches[~pairs.genuine].mean()), float(1 - matches[pairs.genuine].mean())


def fmr_text(fmr: float) -> str:
    """`1e-3` for 0.001: the way false match rates are written."""
    mantissa, exponent = f"{fmr:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"
