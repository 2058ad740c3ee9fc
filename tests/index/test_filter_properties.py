"""Property: over tables of every accepted column type and filters drawn from the grammar, FAISS passes exactly the
rows a plain-Python oracle passes, and the where-expression and JSON spellings parse to the same filter.

The same tables and filters against Qdrant's local mode: `tests/vectordb/test_backend_properties.py`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from retrieval.index import SearchIndex
from retrieval.index.metadata import RESERVED_COLUMNS
from tests.index.filter_strategies import (
    Drawn,
    Node,
    column_names,
    filters,
    oracle,
    parsed,
    passing_ids,
    record_coverage,
    tables,
)
from tests.properties import examples

DIM = 4


def unit_vectors(rows: int, seed: int = 0) -> np.ndarray:
    """`(rows, DIM)` fixed unit vectors: the filter, not the ranking, is under test."""
    vectors = np.random.default_rng(seed).standard_normal((rows, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@st.composite
def tables_and_filters(draw: st.DrawFn, max_filters: int = 6) -> tuple[Drawn, list[Node]]:
    """A drawn table and 1 to `max_filters` filters over its columns."""
    data = draw(tables())
    return data, draw(st.lists(filters(data), min_size=1, max_size=max_filters))


@pytest.mark.property
@examples(0.5)
@given(tables_and_filters())
def test_faiss_passes_the_rows_the_oracle_passes(case: tuple[Drawn, list[Node]]) -> None:
    data, drawn = case
    rows = data.rows
    record_coverage(data, drawn)
    index = SearchIndex.build(unit_vectors(len(rows)), data.table, kind="flat", progress=False)
    for node in drawn:
        where = parsed(node)
        assume(where is not None)
        expected = sorted(row["id"] for row in rows if oracle(node, row))
        assert sorted(passing_ids(index.search(unit_vectors(1, 1), len(rows), filter=where))) == expected, node


@given(column_names())
def test_drawn_column_names_are_never_reserved(name: str) -> None:
    """The long profile drew `rank` (Hypothesis also draws the code's own string constants); an index refuses it at
    build (`RESERVED_COLUMNS`), so a drawn table holding it failed before any filter ran."""
    assert name not in RESERVED_COLUMNS
