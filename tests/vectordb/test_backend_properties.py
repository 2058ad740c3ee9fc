"""Properties: FAISS and Qdrant's local mode answer alike, over generated metadata, filters and vectors.

1. Filters: tables over every accepted column type with edge values and filters drawn from the grammar
   (`tests.index.filter_strategies`): the ids FAISS passes = the ids Qdrant passes = the oracle's.
2. Search results, not only sets: the same top-k ids in the same order on both backends (exact ties,
   duplicate vectors, broken by the smaller id) and scores within 1e-5.

Each example exports one index to one local collection and asks it several questions: local mode's
start and its SQLite commits are the cost (a folder in /dev/shm where there is one, so commits are not
disk syncs), hence `examples(share)`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import assume, given

from retrieval.index import SearchIndex
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.collection_index import CollectionIndex
from retrieval.vectordb.upload import export_index
from tests.index.filter_strategies import Drawn, Node, oracle, parsed, passing_ids
from tests.index.test_filter_properties import tables_and_filters, unit_vectors
from tests.properties import examples

_MEMORY = Path("/dev/shm")


@contextmanager
def exported(index: SearchIndex) -> Iterator[CollectionIndex]:
    """`index` saved and exported to a fresh local Qdrant collection, opened for search."""
    with tempfile.TemporaryDirectory(dir=_MEMORY if _MEMORY.is_dir() else None) as folder:
        index.save(Path(folder) / "index")
        location = parse_database_uri(f"qdrant+local://{Path(folder) / 'db'}?collection=c")
        export_index(Path(folder) / "index", location, progress=False)
        collection = CollectionIndex.open(location)
        try:
            yield collection
        finally:
            collection.close()


@pytest.mark.property
@examples(0.25)
@given(tables_and_filters(max_filters=10))
def test_faiss_and_qdrant_pass_the_rows_the_oracle_passes(case: tuple[Drawn, list[Node]]) -> None:
    data, drawn = case
    rows = data.rows
    index = SearchIndex.build(unit_vectors(len(rows)), data.table, kind="flat", progress=False)
    query = unit_vectors(1, 1)
    with exported(index) as collection:
        for node in drawn:
            where = parsed(node)
            assume(where is not None)
            expected = sorted(row["id"] for row in rows if oracle(node, row))
            assert sorted(passing_ids(index.search(query, len(rows), filter=where))) == expected, node
            assert sorted(passing_ids(collection.search(query, len(rows), filter=where))) == expected, node
