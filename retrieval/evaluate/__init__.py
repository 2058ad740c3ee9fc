"""Evaluation: embed a split, score Recall@K / MAP@R / R-precision, intervals and the proxy classifier."""
