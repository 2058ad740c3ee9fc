"""Embedding files, the hand-over from `retrieval embed` to `index build --embeddings` and to other tools.

One file in a format its suffix chooses (`file_formats.py`: `.parquet`, `.npz`, `.npy`) and parts in a
folder written by several processes (`parts_layout.py`). numpy and pyarrow only, no torch: `inference/`
writes them (`inference/parts_job.py` runs the model) and `index/` reads them, neither through the other.
"""

__all__: list[str] = []
