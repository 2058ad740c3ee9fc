"""Whether an audit's label issues and outliers can be trusted: the checkpoint's own record of how it retrieves.

Label issues are the votes of an image's neighbours, and outliers its distance from every class;
both are only as good as the embedding's neighbourhoods. A weakly trained model finds few planted
label errors, suggests wrong labels and ties its outliers (issue 49: 2 of 5 found, both wrong). The
checkpoint records the best value of its selection metric (`best_score`, on the validation split, or
on test with `train.select_on_test`); when that metric is Recall@1 and lies below `MIN_RECALL_AT_1`,
one warning says so. A checkpoint selected on MAP@R, or with no selection (`best_score` -1), is not
judged: there is no record to read.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIN_RECALL_AT_1", "Selection", "trust_warning"]

MIN_RECALL_AT_1 = 0.5  # below it, fewer than half of the model's nearest neighbours share the query's class


@dataclass(frozen=True)
class Selection:
    """A checkpoint's model-selection record: the metric, its best value and the 1-based epoch it was reached."""

    metric: str  # the run's train.select_on: "recall@1" or "map@r"
    score: float  # -1: no selection was made (no validation split)
    epoch: int


def trust_warning(selection: Selection | None) -> str | None:
    """One line when `selection` says the model retrieves poorly (Recall@1 below `MIN_RECALL_AT_1`), else None."""
    if selection is None or selection.metric != "recall@1" or not 0.0 <= selection.score < MIN_RECALL_AT_1:
        return None
    return (
        f"warning: this checkpoint's Recall@1 at model selection is {selection.score:.4f} (epoch {selection.epoch}), "
        f"below {MIN_RECALL_AT_1}: it retrieves poorly, so its label issues and outliers are not to be trusted"
    )
