"""Every accepted metadata type filters alike in FAISS and Qdrant; an index holding another is refused before export.

Issue 47's defects 2 and 9 on the Qdrant side: `u64 >= 9223372036854775807` passed [1, 2, 3] in FAISS
and [1, 3] in Qdrant, and a binary column failed halfway through `index export` (its one-line refusals:
tests/cli/test_index_export_cli.py).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from retrieval.index import SearchIndex
from retrieval.index.filter_language import parse_where
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.collection_index import CollectionIndex
from retrieval.vectordb.upload import export_index
from tests.index.test_metadata_types import ACCEPTED, VECTORS, N

FILTERS = [
    "u64 >= 9223372036854775807",  # defect 2: the row of 2**63 - 1, on both backends
    "u64 > 9223372036854775806 or u64 < 1",
    "u64 in (9223372036854775807, 3)",
    "i64 <= -9223372036854775808 or i64 >= 9223372036854775807",
    "i8 < 1000 and u8 > -5",
    "u32 = 4294967295 or i32 != -2147483648",
    "f16 = 65504 or f16 = 5.960464477539063e-08 or f16 = 0",
    "f32 = 1e-45 or f32 > 3.4e38",
    "f32 = 0.1",  # float32's 0.1 is not float64's
    "f64 = 5e-324 or f64 >= 1.7976931348623157e308 or f64 = 0",
    "s = 'NaN' or s = '' or s = 'é'",
    "s = 'e\u0301'",
    "ls in ('', 'c') or ls is null",
    "cat = 'x' or cat not in ('y')",
    "b = true or b is null",
    "not b != false",
    "none is null and none != 3",
    "none = 'a' or not none < 5",
]


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    root = tmp_path_factory.mktemp("accepted")
    index = SearchIndex.build(VECTORS, pa.table(ACCEPTED), kind="flat", progress=False)
    index.save(root / "index")
    location = parse_database_uri(f"qdrant+local://{root / 'db'}?collection=c")
    export_index(root / "index", location, progress=False)
    collection = CollectionIndex.open(location)
    yield index, collection
    collection.close()


@pytest.mark.parametrize("where", FILTERS)
def test_every_accepted_type_filters_the_same_items_in_faiss_and_qdrant(backends, where: str) -> None:
    index, collection = backends
    answers = [backend.search(VECTORS[0], N, filter=parse_where(where))[1][0] for backend in backends]
    found = [sorted(int(i) for i in ids if i >= 0) for ids in answers]
    rows = index.metadata_for(index.ids)
    expected = {
        "u64 >= 9223372036854775807": [1],
        "s = 'NaN' or s = '' or s = 'é'": [1, 2, 5],
        "s = 'e\u0301'": [4],
        "f32 = 0.1": [],
    }.get(where)
    assert found[0] == found[1], (where, rows)
    assert expected is None or found[0] == expected
