"""The training pairs of a re-ranker: each training image with its nearest matches and nearest non-matches.

Mined from the checkpoint's own embeddings of the training split (or of half of the validation classes,
`sources.py`): each image is paired with its `depth`
nearest images of its own class and its `depth` nearest images of other classes. Both kinds are mined
explicitly because the embedder fits its training split: there an image's plain nearest neighbours are
nearly all matches (glyphs at 64 px: 55,500 of 56,800 pairs), while on unseen classes the blend must set
the near misses apart from the matches. The test split is never mined.
"""

from __future__ import annotations

from typing import NamedTuple

import faiss
import numpy as np

from retrieval.errors import UserError
from retrieval.index.filtered_search import search_parameters, search_with

__all__ = ["Pairs", "mine_pairs"]


class Pairs(NamedTuple):
    """Training pairs, row-aligned: indices of the two images in the training split, target and cosine."""

    queries: np.ndarray  # (M,) int64
    results: np.ndarray  # (M,) int64
    targets: np.ndarray  # (M,) float32: 1 when the two images share the class
    cosines: np.ndarray  # (M,) float32: their embeddings' inner product

    @property
    def positives(self) -> int:
        """How many pairs match."""
        return int(self.targets.sum())


def mine_pairs(embeddings: np.ndarray, labels: np.ndarray, depth: int, name: str = "the training split") -> Pairs:
    """Each image paired with its `depth` nearest matches and `depth` nearest non-matches by `(N, D)` unit `embeddings`.

    Exact search (FAISS), one class at a time. Rows that are NaN (images skipped as unreadable) take no part;
    `name` says in messages which images these are.

    Raises:
        UserError: multi-label data, fewer than two readable images, no two images of one class, or one class only.
    """
    if labels.ndim != 1:
        raise UserError("the learned re-ranker trains on single-label data; a multi-label CSV has no pairs target yet")
    rows = np.flatnonzero(~np.isnan(embeddings).any(axis=1))
    if len(rows) < 2:
        raise UserError(f"{name} has {len(rows)} readable image(s); a re-ranker needs pairs of images")
    vectors = np.ascontiguousarray(embeddings[rows], dtype=np.float32)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    _, classes, counts = np.unique(labels[rows], return_inverse=True, return_counts=True)
    members = np.split(np.argsort(classes, kind="stable"), np.cumsum(counts)[:-1])
    parts = [_class_pairs(index, vectors, group, depth) for group in members]
    queries, results, cosines = (np.concatenate(columns) for columns in zip(*parts, strict=True))
    targets = (classes[queries] == classes[results]).astype(np.float32)
    pairs = Pairs(rows[queries], rows[results], targets, cosines)
    if pairs.positives == 0:
        raise UserError(
            f"no two of the {len(rows)} readable images of {name} share a class: a re-ranker learns from matching pairs"
        )
    if pairs.positives == len(targets):
        raise UserError(
            f"every readable image of {name} has the same class: a re-ranker learns from non-matching pairs"
        )
    return pairs


def _class_pairs(
    index: faiss.IndexFlatIP, vectors: np.ndarray, members: np.ndarray, depth: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queries, results and cosines of one class's images: their nearest `depth` matches and non-matches."""
    inside = faiss.IDSelectorBatch(members)
    outside = faiss.IDSelectorNot(inside)  # holds `inside` by reference: both stay alive until the searches end
    width = min(depth + 1, len(members))
    near, matches = search_with(index, vectors[members], width, search_parameters("SearchParameters", sel=inside))
    # Each image drops itself, or (where duplicates hid it past the searched width) its last match.
    own = matches == members[:, None]
    drop = np.where(own.any(axis=1), own.argmax(axis=1), width - 1)
    keep = np.ones(matches.shape, bool)
    keep[np.arange(len(members)), drop] = False
    far, others = search_with(index, vectors[members], depth, search_parameters("SearchParameters", sel=outside))
    found = np.concatenate([matches[keep].reshape(len(members), width - 1), others], axis=1)
    scores = np.concatenate([near[keep].reshape(len(members), width - 1), far], axis=1)
    queries = np.repeat(members, found.shape[1]).reshape(found.shape)
    valid = found >= 0
    return queries[valid], found[valid], scores[valid].astype(np.float32)
