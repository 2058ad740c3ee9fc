"""Evaluation metrics for retrieval: Recall@K, MAP@R and R-precision from exact FAISS search."""

from retrieval.metrics.retrieval import check_queries_have_positives, retrieval_metrics

__all__ = ["check_queries_have_positives", "retrieval_metrics"]
