"""The torch-free pieces that index, evaluation and serving share, below all of them.

Re-ranking (`rerank.py`), the stored match threshold (`match_threshold.py`), metadata column types
(`column_types.py`), a run's `metrics.jsonl` lines (`epoch_record.py`, which training writes and
reports plot) and the eval transform as data (`preprocess.py`): numpy, Pillow, FAISS and pydantic only,
importing nothing of `retrieval` but `errors`, `images` and `validation`, so that `index/`, `evaluate/`,
`serve/`, `train/` and `report/` use them without importing each other.
"""

__all__: list[str] = []
