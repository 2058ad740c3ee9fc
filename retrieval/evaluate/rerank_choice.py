"""`evaluate --rerank`: a re-ranking method with its parameters chosen on the validation split.

A spec with parameters (`qe:k=2,alpha=3`) is used as given. A bare method name (`qe`) tries the
method's parameter grid (`retrieval.core.rerank`) on the validation split and keeps the best
MAP@R (ties: Recall@1, then the first in grid order); without a validation split it uses the
method's published defaults and says so. The test split is scored once, with the choice.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from retrieval.core.rerank import RERANK_METHODS, Reranker, parse_rerank
from retrieval.data import EvalSplit
from retrieval.evaluate.evaluator import score_split
from retrieval.validation import Record

__all__ = ["RerankChoice", "RerankRecord", "choose_rerank"]


class RerankRecord(Record):
    """The re-ranking applied to test, as the `rerank` entry of `evaluate --json` holds it."""

    spec: str  # the method with its parameters, `qe:k=2,alpha=3.0`
    chosen_on: str  # "given", "validation" or why the defaults were used
    validation: dict[str, float] | None  # val MAP@R / Recall@1 with the choice and without re-ranking


class RerankChoice(NamedTuple):
    """The reranker to apply to test, and how it was chosen."""

    reranker: Reranker
    chosen_on: str  # "given", "validation" or "defaults"
    validation: dict[str, float] | None  # val MAP@R / Recall@1 with the choice and without re-ranking

    def line(self) -> str:
        """`re-ranking: qe:k=2,alpha=3.0 (chosen on validation: MAP@R 0.8123 vs 0.8011 without)`."""
        text = f"re-ranking: {self.reranker.spec()}"
        if self.validation is None:
            return f"{text} ({self.chosen_on})"
        val = self.validation
        return (
            f"{text} (chosen on validation: MAP@R {val['map@r']:.4f} vs {val['map@r_without']:.4f} without, "
            f"Recall@1 {val['recall@1']:.4f} vs {val['recall@1_without']:.4f})"
        )

    def record(self) -> RerankRecord:
        """The choice as the record `evaluate --json` writes."""
        return RerankRecord(spec=self.reranker.spec(), chosen_on=self.chosen_on, validation=self.validation)


def choose_rerank(spec: str, val: tuple[np.ndarray, EvalSplit] | None) -> RerankChoice:
    """The reranker `spec` names, its parameters chosen on `val` (embeddings, split) when the spec gives none.

    Raises:
        UserError: an unknown method or parameter in `spec`.
    """
    reranker = parse_rerank(spec)
    if ":" in spec:
        return RerankChoice(reranker, "given", None)
    if val is None:
        return RerankChoice(reranker, "defaults: no validation split to choose on", None)
    embeddings, split = val
    plain = score_split(embeddings, split)[0]
    best, best_key, best_metrics = reranker, (-1.0, -1.0), plain
    for candidate in RERANK_METHODS[type(reranker).name].grid():
        metrics = score_split(embeddings, split, rerank=candidate)[0]  # type: ignore[arg-type]
        key = (metrics["map@r"], metrics["recall@1"])
        if key > best_key:
            best, best_key, best_metrics = candidate, key, metrics  # type: ignore[assignment]
    validation = {
        "map@r": best_metrics["map@r"],
        "recall@1": best_metrics["recall@1"],
        "map@r_without": plain["map@r"],
        "recall@1_without": plain["recall@1"],
    }
    return RerankChoice(best, "validation", validation)
