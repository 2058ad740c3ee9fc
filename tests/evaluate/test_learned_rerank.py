"""`evaluate --reranker`: the split re-ranker scores the rows it is told.

That `evaluate --reranker` prints test scored with the re-ranker and with the embedding alone, and refuses a
re-ranker that does not belong, is `tests/cli/test_evaluate_cli.py`'s."""

from __future__ import annotations

import numpy as np
import pytest

from retrieval.core.learned_rerank import Blend
from retrieval.data import EvalSplit
from retrieval.evaluate.evaluator import score_split
from retrieval.evaluate.learned_rerank import split_reranker
from retrieval.models.pair_model import PairHead


def test_a_split_reranker_scores_the_rows_it_is_told_and_skips_unreadable_ones():
    """A head that answers 1 exactly for the pairs with row 7 makes row 7 every other query's first result."""
    import torch

    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((12, 4)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    embeddings[5] = np.nan  # an image skipped as unreadable: row 7 is the 7th of the rows scored
    labels = np.arange(12) % 3
    descriptors = np.zeros((12, 2), np.float32)
    descriptors[7] = 1.0
    head = PairHead(2)  # [q * r, |q - r|, cosine] -> Linear -> GELU -> Linear
    with torch.no_grad():
        for layer in (head.mlp[0], head.mlp[2]):
            layer.weight.zero_()
            layer.bias.zero_()
        head.mlp[0].weight[0, 2] = 1.0  # |q - r| of the first column: 1 for a pair with row 7, else 0
        head.mlp[2].weight[0, 0] = 50.0
        head.mlp[2].bias.fill_(-25.0)  # logit +17 or -25
    split = EvalSplit(dataset=None, labels=labels)  # type: ignore[arg-type]
    reranker = split_reranker(Blend(depth=11, weight=1.0), head, embeddings, descriptors, split)
    plain = score_split(embeddings, split)[1]
    _, scores = score_split(embeddings, split, rerank=reranker)
    kept = np.array([row for row in range(12) if row != 5])
    assert scores.rows.tolist() == list(range(11))  # positions among the rows scored
    for position, row in enumerate(kept[scores.rows]):
        expected = labels[row] == labels[7] if row != 7 else plain.hits(1)[position]
        assert scores.hits(1)[position] == expected, row


pytestmark = pytest.mark.slow
