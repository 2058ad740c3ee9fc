"""Evaluation metrics for retrieval: Recall@K, MAP@R and R-precision from exact FAISS search."""

from retrieval.metrics.bootstrap import Interval, bootstrap_interval, class_bootstrap, paired_difference
from retrieval.metrics.retrieval import PerQuery, check_queries_have_positives, per_query_scores, retrieval_metrics

__all__ = [
    "Interval",
    "PerQuery",
    "bootstrap_interval",
    "check_queries_have_positives",
    "class_bootstrap",
    "paired_difference",
    "per_query_scores",
    "retrieval_metrics",
]
