"""Evaluation metrics for retrieval: Recall@K, MAP@R and R-precision from exact FAISS search, per group too."""

from retrieval.metrics.groups import GROUP_NAMES, frequency_groups, group_metrics, proxy_predictions
from retrieval.metrics.retrieval import check_queries_have_positives, retrieval_metrics

__all__ = [
    "GROUP_NAMES",
    "check_queries_have_positives",
    "frequency_groups",
    "group_metrics",
    "proxy_predictions",
    "retrieval_metrics",
]
