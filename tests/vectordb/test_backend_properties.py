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

import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from retrieval.index import SearchIndex
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.collection_index import CollectionIndex
from retrieval.vectordb.upload import export_index
from tests.index.filter_strategies import Drawn, Node, filters, oracle, parsed, passing_ids, record_coverage, tables
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
@examples(0.2)
@given(tables_and_filters(max_filters=10))
def test_faiss_and_qdrant_pass_the_rows_the_oracle_passes(case: tuple[Drawn, list[Node]]) -> None:
    data, drawn = case
    rows = data.rows
    record_coverage(data, drawn)
    index = SearchIndex.build(unit_vectors(len(rows)), data.table, kind="flat", progress=False)
    query = unit_vectors(1, 1)
    with exported(index) as collection:
        for node in drawn:
            where = parsed(node)
            assume(where is not None)
            expected = sorted(row["id"] for row in rows if oracle(node, row))
            assert sorted(passing_ids(index.search(query, len(rows), filter=where))) == expected, node
            assert sorted(passing_ids(collection.search(query, len(rows), filter=where))) == expected, node


@st.composite
def searches(draw: st.DrawFn) -> tuple[Drawn, np.ndarray, np.ndarray, int, list[Node | None]]:
    """A table, its vectors (each row one of a few directions: duplicates tie exactly), queries, k and filters."""
    data = draw(tables(max_rows=24))
    rows, dim = data.table.num_rows, draw(st.integers(2, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    directions = _unit(rng.standard_normal((draw(st.integers(1, 6)), dim)))
    vectors = directions[draw(st.lists(st.integers(0, len(directions) - 1), min_size=rows, max_size=rows))]
    stored = st.integers(0, rows - 1).map(lambda row: vectors[row])
    fresh = st.integers(0, 2**32 - 1).map(lambda seed: _unit(np.random.default_rng(seed).standard_normal((1, dim)))[0])
    queries = np.stack(draw(st.lists(st.one_of(stored, fresh), min_size=1, max_size=3)))
    # distinct directions score apart by more than the backends' rounding, so only equal vectors tie
    scores = np.sort(directions.astype(np.float64) @ queries.T.astype(np.float64), axis=0)
    assume(len(directions) == 1 or np.diff(scores, axis=0).min() > 1e-4)
    wanted = draw(st.lists(st.one_of(st.none(), filters(data)), min_size=1, max_size=3))
    return data, vectors, queries, draw(st.integers(1, rows + 2)), wanted


def exact_scores(vectors: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """`(N, Q)` inner products, each rounded once from its exact value, so equal vectors score exactly alike.

    A float32 product is exact in float64 and `math.fsum` sums exactly; a BLAS product does not promise equal
    rows equal results (its tiles sum in different orders): the long profile found two equal rows of 22 one
    ulp apart, and the oracle then ordered that tie against the id.
    """
    wide, asked = vectors.astype(np.float64), queries.astype(np.float64)
    return np.array([[math.fsum(row * query) for query in asked] for row in wide]).reshape(len(wide), len(asked))


def test_equal_rows_score_alike_in_the_oracle_where_a_blas_product_splits_them() -> None:
    rng = np.random.default_rng(0)
    for _ in range(2000):  # the shapes `searches` draws; a BLAS product splits equal rows in a few of them
        dim = int(rng.integers(2, 9))
        directions = _unit(rng.standard_normal((int(rng.integers(1, 7)), dim)))
        vectors = directions[rng.integers(0, len(directions), int(rng.integers(1, 25)))]
        queries = directions[rng.integers(0, len(directions), int(rng.integers(1, 4)))]
        exact = exact_scores(vectors, queries)
        for row in range(len(vectors)):
            same = (vectors == vectors[row]).all(axis=1)
            assert (exact[same] == exact[row]).all()


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.property
@examples(0.2)
@given(searches())
def test_faiss_and_qdrant_return_the_same_top_k_in_the_same_order(
    case: tuple[Drawn, np.ndarray, np.ndarray, int, list[Node | None]],
) -> None:
    data, vectors, queries, k, wanted = case
    rows = data.rows
    index = SearchIndex.build(vectors, data.table, kind="flat", progress=False)
    exact = exact_scores(vectors, queries)
    with exported(index) as collection:
        for node in wanted:
            where = None if node is None else parsed(node)
            assume(node is None or where is not None)
            passing = [row["id"] for row in rows if node is None or oracle(node, row)]
            faiss_scores, faiss_ids = index.search(queries, k, filter=where)
            qdrant_scores, qdrant_ids = collection.search(queries, k, filter=where)
            for query in range(len(queries)):  # the oracle: by exact score, equal scores by id
                expected = sorted(passing, key=lambda i: (-exact[i, query], i))[:k]
                assert faiss_ids[query][: len(expected)].tolist() == expected, (node, query)
            assert qdrant_ids.tolist() == faiss_ids.tolist(), node
            np.testing.assert_allclose(qdrant_scores, faiss_scores, atol=1e-5)
