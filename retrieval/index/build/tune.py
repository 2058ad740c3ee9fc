"""The tune phase of a build: search parameters tuned on the held-out queries, then the index measured with them."""

from __future__ import annotations

from collections.abc import Mapping

import faiss
import numpy as np

from retrieval.index.build.sample import Sample
from retrieval.index.tuning import (
    TUNED_K,
    Measurement,
    label_space,
    measure,
    set_search_parameters,
    tune_search_parameters,
)

__all__ = ["tune_and_measure"]


def tune_and_measure(
    index: faiss.Index,
    fixed: Mapping[str, int],
    sample: Sample,
    queries: np.ndarray,
    truth: tuple[np.ndarray, np.ndarray],
    target: float | None,
    best_effort: bool,
    first_id: int,
) -> tuple[dict[str, int], Measurement]:
    """The cheapest search parameters of `index` reaching `target` (no target: `fixed`), set, and measured.

    Args:
        index: every row added but the held-out ones.
        fixed: the kind's fixed search parameters (the plan's).
        sample: the checked rows tuning requires to find themselves first.
        queries: `(Q, D)` held-out or given queries; `truth` `(scores, ids)`, `(Q, depth)` each, their exact
            neighbours (the scores let ties count as equal, in tuning and in the measurement alike).
        target: the 10-recall@10 to reach; None keeps the kind's fixed parameters.
        best_effort: the most accurate setting explored when none reaches `target`, instead of an error.
        first_id: the id of row 0.

    Raises:
        UserError: a target no setting reaches, unless `best_effort`.
    """
    true_scores, true_ids = truth
    searchable, to_label = label_space(index)
    parameters = dict(fixed)
    if target is not None:
        stored = (sample.checked_vectors, to_label(sample.checked + first_id))
        parameters, _ = tune_search_parameters(
            searchable,
            queries,
            to_label(true_ids),
            target,
            true_ids.shape[1],
            stored,
            best_effort=best_effort,
            true_scores=true_scores,
        )
    set_search_parameters(index, parameters)
    return parameters, measure(lambda q, k: index.search(q, k), queries, true_ids, TUNED_K, true_scores)
