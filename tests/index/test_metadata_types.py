"""The one list of metadata column types: each accepted one is stored, anything else refused when the index is built.

Issue 47's defects 2, 3 and 9 as regressions: a uint64 past int64, a list column (whose `[]` Qdrant
calls null) and a binary column were accepted and answered differently on Qdrant, or failed at export.
The binary column's one-line refusal by `index build --embeddings` is tests/cli/test_index_from_files_cli.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from retrieval.embedding_files.file_formats import write_embeddings
from retrieval.errors import UserError
from retrieval.index import SearchIndex, clustered_unit_vectors
from retrieval.index.filter_language import parse_where
from retrieval.index.from_embeddings import open_embedding_files
from retrieval.index.metadata_types import check_metadata, check_metadata_schema
from retrieval.runtime.files import file_sha256

N = 6
VECTORS = clustered_unit_vectors(N, 8, n_clusters=2, seed=0)[0]
INT64_MAX = 2**63 - 1

ACCEPTED = {
    "b": pa.array([True, False, None, True, False, True]),
    "i8": pa.array([-128, 127, None, 0, 1, -1], pa.int8()),
    "i16": pa.array([-(2**15), 2**15 - 1, None, 0, 1, -1], pa.int16()),
    "i32": pa.array([-(2**31), 2**31 - 1, None, 0, 1, -1], pa.int32()),
    "i64": pa.array([-(2**63), INT64_MAX, None, 0, 1, -1], pa.int64()),
    "u8": pa.array([0, 255, None, 1, 2, 3], pa.uint8()),
    "u16": pa.array([0, 2**16 - 1, None, 1, 2, 3], pa.uint16()),
    "u32": pa.array([0, 2**32 - 1, None, 1, 2, 3], pa.uint32()),
    "u64": pa.array([0, INT64_MAX, None, 1, 2, 3], pa.uint64()),
    "f16": pa.array(np.array([65504, -0.0, 6e-8, 1.5, 0, 1], np.float16)),
    "f32": pa.array([3.4028234663852886e38, -0.0, 1e-45, None, 0.1, 1.0], pa.float32()),
    "f64": pa.array([1.7976931348623157e308, -0.0, 5e-324, None, 0.1, 1.0], pa.float64()),
    "s": pa.array(["a", "", "NaN", None, "e\u0301", "\u00e9"], pa.string()),
    "ls": pa.array(["a", "", "NaN", None, "b", "c"], pa.large_string()),
    "cat": pa.array(["x", "y", None, "x", "z", "y"]).dictionary_encode(),
    "none": pa.nulls(N),
}


def test_every_accepted_type_is_stored_as_it_is() -> None:
    index = SearchIndex.build(VECTORS, pa.table(ACCEPTED), kind="flat", progress=False)
    assert index.metadata_schema.remove(0) == pa.table(ACCEPTED).schema
    assert index.metadata_for([1])[0]["u64"] == INT64_MAX


def test_uint64_values_past_int64_are_refused_at_build() -> None:
    """Defect 2: 2**63 in a uint64 column, which Qdrant's int64 payloads cannot hold, gave [1, 3] where FAISS gave
    [1, 2, 3] for `u64 >= 9223372036854775807`; now the build refuses it, naming the column, value and row."""
    table = pa.table({"u64": pa.array([0, INT64_MAX, 2**63, 2**64 - 1, 5, 6], pa.uint64())})
    with pytest.raises(UserError, match=r"column 'u64' .*holds 9223372036854775808 \(row 3\).* store it as a string"):
        SearchIndex.build(VECTORS, table, kind="flat", progress=False)
    with pytest.raises(UserError, match=r"column 'u64' of x.parquet holds 9223372036854775808 \(row 3\)"):
        check_metadata(table, "x.parquet")


def test_list_columns_are_refused_at_build() -> None:
    """Defect 3: `lst is null` passed 8 rows on FAISS and 18 on Qdrant (whose `is_empty` also takes `[]`)."""
    lists = pa.array([[1], [], None, [2, 3], [], []], pa.list_(pa.int64()))
    with pytest.raises(UserError, match=r"metadata column 'lst' of the metadata has type list<item: int64>"):
        SearchIndex.build(VECTORS, pa.table({"lst": lists}), kind="flat", progress=False)


@pytest.mark.parametrize(
    "array",
    [
        pa.array([b"\xff\xfe"] * N, pa.binary()),
        pa.array([b"ab"] * N, pa.binary(2)),
        pa.array([1] * N, pa.decimal128(5, 2)),
        pa.array([0] * N, pa.timestamp("s")),
        pa.array([0] * N, pa.date32()),
        pa.array([{"a": 1}] * N),
        pa.array([[("a", 1)]] * N, pa.map_(pa.string(), pa.int64())),
        pa.array([[1.0]] * N, pa.large_list(pa.float64())),
        pa.array(["a"] * N, pa.string_view()),
    ],
    ids=lambda array: str(array.type),
)
def test_other_types_are_refused_in_one_line_naming_the_column_and_its_type(array: pa.Array) -> None:
    expected = f"metadata column 'x' of the metadata has type {re.escape(str(array.type))},"
    with pytest.raises(UserError, match=expected) as error:
        SearchIndex.build(VECTORS, pa.table({"x": array}), kind="flat", progress=False)
    assert "\n" not in str(error.value) and "bool, integers, floats" in str(error.value)


def test_a_filter_on_a_column_without_values_passes_nothing_but_is_null() -> None:
    index = SearchIndex.build(VECTORS, pa.table({"none": pa.nulls(N)}), kind="flat", progress=False)
    for where, expected in [("none is null", N), ("none = 3", 0), ("none != 'a'", 0), ("not none < 2", N)]:
        assert (index.search(VECTORS[0], N, filter=parse_where(where))[1][0] >= 0).sum() == expected, where


def test_a_datetime_column_of_a_numpy_embedding_file_is_refused_from_its_header(tmp_path: Path) -> None:
    path = tmp_path / "e.npz"
    np.savez(path, embeddings=VECTORS, ids=np.array([f"{i}.png" for i in range(N)]), stamp=np.zeros(N, "M8[s]"))
    with pytest.raises(UserError, match=rf"metadata column 'stamp' of {path} has type timestamp\[s\]"):
        open_embedding_files([path])


def test_the_schema_check_reads_types_only() -> None:
    check_metadata_schema(pa.table(ACCEPTED).schema, "x")
    check_metadata_schema(pa.schema([("u64", pa.uint64())]), "x")  # values are checked where rows are read


def test_a_parts_directory_keeps_each_columns_type_and_nulls(tmp_path: Path) -> None:
    """Found while checking where types enter: parts were read through numpy, so an int64 column with a null came
    back float64 holding NaN (refused as NaN, and 2**60 + 1 rounded), where the part's parquet says int64."""
    parts = tmp_path / "parts"
    parts.mkdir()
    path = parts / "part-00000.parquet"
    columns = {"n": pa.array([1, None, 3, 2**60 + 1, 5, 6]), "u": pa.array(range(N), pa.uint8()), "s": ACCEPTED["s"]}
    write_embeddings(path, VECTORS, [f"/{i}.png" for i in range(N)], pa.array(range(N)), columns)
    record = {"part": 0, "first_row": 0, "rows": N, "sha256": file_sha256(path), "dim": 8}
    path.with_suffix(".json").write_text(json.dumps(record))
    (parts / "_SUCCESS").write_text(json.dumps({"rows": N, "dim": 8, "parts": [path.name]}))
    files = open_embedding_files([parts])
    table = files.metadata()
    assert table is not None and table.schema == files.files[0].schema()
    assert (
        table["n"].to_pylist() == [1, None, 3, 2**60 + 1, 5, 6] and table["s"].to_pylist() == ACCEPTED["s"].to_pylist()
    )
