"""The training pairs of a re-ranker: each training image with its nearest training images by the trained embedder.

Mined from the checkpoint's own neighbours, the pairs are the cases the blend re-scores: the near misses the
embedder ranks high (negatives) and the matches it finds (hard positives among them). Only the training
split is mined; the validation split chooses the blend and the test split is never read.
"""

from __future__ import annotations

from typing import NamedTuple

import faiss
import numpy as np

from retrieval.errors import UserError

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


def mine_pairs(embeddings: np.ndarray, labels: np.ndarray, depth: int) -> Pairs:
    """Each image paired with its `depth` nearest other images by `(N, D)` unit `embeddings` (exact search).

    Rows that are NaN (images skipped as unreadable) take no part.

    Raises:
        UserError: multi-label data, or too few images or pairs of each kind to learn from.
    """
    if labels.ndim != 1:
        raise UserError("the learned re-ranker trains on single-label data; a multi-label CSV has no pairs target yet")
    rows = np.flatnonzero(~np.isnan(embeddings).any(axis=1))
    if len(rows) < 2:
        raise UserError(f"the training split has {len(rows)} readable image(s); a re-ranker needs pairs of images")
    vectors = np.ascontiguousarray(embeddings[rows], dtype=np.float32)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    width = min(depth + 1, len(rows))
    scores, found = index.search(vectors, width)
    own = found == np.arange(len(rows))[:, None]
    # Each row drops itself, or (where duplicates hid it past the searched width) its last result.
    drop = np.where(own.any(axis=1), own.argmax(axis=1), width - 1)
    keep = np.ones(found.shape, bool)
    keep[np.arange(len(rows)), drop] = False
    queries = np.repeat(np.arange(len(rows)), width - 1)
    results = found[keep]
    valid = results >= 0
    queries, results, cosines = queries[valid], results[valid], scores[keep][valid]
    targets = (labels[rows][queries] == labels[rows][results]).astype(np.float32)
    pairs = Pairs(rows[queries], rows[results], targets, cosines.astype(np.float32))
    if pairs.positives == 0 or pairs.positives == len(targets):
        kind = "matching" if pairs.positives == 0 else "non-matching"
        raise UserError(
            f"the {len(targets)} pairs mined from the training split's {depth} nearest neighbours hold no {kind} "
            "pair; raise reranker.mine_depth or train on more classes"
        )
    return pairs
