"""Evaluation metrics for retrieval: Recall@K, MAP@R and R-precision from exact FAISS search, per group too."""

from retrieval.metrics.bootstrap import Interval, bootstrap_interval, class_bootstrap, paired_difference
from retrieval.metrics.groups import GROUP_NAMES, class_counts, frequency_groups, group_metrics, proxy_predictions
from retrieval.metrics.ranking import (
    PerQuery,
    check_queries_have_positives,
    nearest_neighbor_agreement,
    per_query_scores,
    retrieval_metrics,
)

__all__ = [
    "GROUP_NAMES",
    "Interval",
    "PerQuery",
    "bootstrap_interval",
    "check_queries_have_positives",
    "class_counts",
    "class_bootstrap",
    "frequency_groups",
    "group_metrics",
    "nearest_neighbor_agreement",
    "paired_difference",
    "per_query_scores",
    "proxy_predictions",
    "retrieval_metrics",
]
