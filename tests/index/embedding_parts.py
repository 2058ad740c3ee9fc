"""The folder of parts `retrieval embed --out DIR/` writes, made from given vectors for the index tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from retrieval.embedding_files.file_formats import write_embeddings
from retrieval.runtime.files import file_sha256

PART_ROWS = 1000


def write_parts(directory: Path, vectors: np.ndarray, labels: list[str], finished: bool = True) -> None:
    """The layout `retrieval embed --out DIR/` writes: parquet parts, a `.json` each, `_SUCCESS` last."""
    directory.mkdir(parents=True)
    names = []
    for part, start in enumerate(range(0, len(vectors), PART_ROWS)):
        stop = min(start + PART_ROWS, len(vectors))
        path = directory / f"part-{part:05d}.parquet"
        write_embeddings(path, vectors[start:stop], [f"/img/{i}.png" for i in range(start, stop)], labels[start:stop])
        record = {"part": part, "first_row": start, "rows": stop - start, "sha256": file_sha256(path), "dim": 32}
        path.with_suffix(".json").write_text(json.dumps(record))
        names.append(path.name)
    if finished:
        success = {"rows": len(vectors), "dim": 32, "parts": names, "checkpoint_sha256": "ab" * 32}
        (directory / "_SUCCESS").write_text(json.dumps(success))
