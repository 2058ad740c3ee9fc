"""Embeddings files keep the metadata types the source was read with, and an index built from them gets the same."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from retrieval.core.column_types import typed_table
from retrieval.embedding_files.file_formats import read_embeddings, write_embeddings
from retrieval.index.from_embeddings import open_embedding_files

ROWS = typed_table(
    {
        "path": ["/i/0.png", "/i/1.png", "/i/2.png"],
        "label": ["3", "5", "3"],
        "price": ["10", "", "2.5"],
        "count": ["1", "2", "3"],
        "shop": ["a", "", "b"],
    }
)


@pytest.mark.parametrize("suffix", ["parquet", "npz", "npy"])
def test_typed_columns_round_trip_with_their_nulls(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"e.{suffix}"
    extra = {name: ROWS[name] for name in ("price", "count", "shop")}
    write_embeddings(path, np.eye(3, 4, dtype=np.float32), ROWS["path"], ROWS["label"], extra)
    assert read_embeddings(path)["labels"].dtype == np.int64
    metadata = open_embedding_files([path]).metadata()
    assert metadata is not None
    assert metadata.schema == ROWS.schema
    assert metadata.to_pydict() == ROWS.to_pydict()


def test_text_cells_are_typed_by_the_same_rule(tmp_path: Path) -> None:
    path = tmp_path / "e.parquet"
    write_embeddings(path, np.eye(2, 4, dtype=np.float32), ["/a", "/b"], ["7", ""], {"price": ["1.5", "2"]})
    metadata = open_embedding_files([path]).metadata()
    assert metadata is not None
    assert metadata.schema == pa.schema([("path", pa.string()), ("label", pa.int64()), ("price", pa.float64())])
    assert metadata["label"].to_pylist() == [7, None]
