"""The torch-free pieces that index, evaluation and serving share, below all of them.

Re-ranking (`rerank.py`), the stored match threshold (`match_threshold.py`) and metadata column types
(`column_types.py`): numpy, FAISS and pydantic only, importing nothing of `retrieval` but `errors` and
`validation`, so that `index/`, `evaluate/` and `serve/` use them without importing each other.
"""

__all__: list[str] = []
