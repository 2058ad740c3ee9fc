"""The one list of metadata column types an index accepts: on it, every backend gives the same answers.

Accepted (the FAISS index, `embed`'s files and an exported Qdrant collection hold them alike, and a
filter passes the same rows on each, for every operator):

- `bool`;
- integers: int8, int16, int32, int64, uint8, uint16, uint32, and uint64 holding values up to
  2**63 - 1 (a vector database's payload integers are int64);
- floats: float16, float32, float64, finite (JSON and the database hold no NaN or infinity: `Metadata`
  refuses them);
- strings: string, large_string;
- `null` (a column without a value: `is null` passes every row, a comparison none);
- a dictionary (pandas' categorical) of any of these.

Anything else is refused where the index is built (`Metadata.from_rows`, and from the files' headers
before an `--embeddings` build reads a row), and by `index export` for an index an earlier version
built, before the collection is touched: lists (Qdrant matches a list by any element and calls `[]`
null), binary (not JSON), decimals (float64 would round them), dates and times, structs and maps.
Supporting them on every backend is not cheap; a one-line refusal naming the column is.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from retrieval.errors import UserError

__all__ = ["check_metadata", "check_metadata_schema"]

_INT64_MAX = 2**63 - 1
_ACCEPTED = "use bool, integers, floats or strings (or a dictionary of them)"


def check_metadata_schema(schema: pa.Schema, source: str) -> None:
    """`UserError` naming the first column of `schema` whose type is not accepted (see the module docstring).

    Args:
        schema: the columns' types (an index's `id` column included or not).
        source: what the message calls their origin (`the metadata`, a file's path, `index DIR`).
    """
    for field in schema:
        if not _accepted(field.type):
            raise UserError(
                f"metadata column {field.name!r} of {source} has type {field.type}, which an index does not store; "
                f"{_ACCEPTED}: convert the column, e.g. to a string, or leave it out"
            )


def check_metadata(table: pa.Table, source: str) -> None:
    """`check_metadata_schema` of `table`, then its values: `UserError` for a uint64 past 2**63 - 1, naming its row."""
    check_metadata_schema(table.schema, source)
    for name in table.column_names:
        column = table[name]
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if not pa.types.is_uint64(column.type):
            continue
        past = pc.fill_null(pc.greater(column, pa.scalar(_INT64_MAX, pa.uint64())), False)
        if pc.any(past).as_py():
            row = pc.index(past, True).as_py()
            raise UserError(
                f"metadata column {name!r} of {source} holds {column[row].as_py()} (row {row + 1}), past "
                f"{_INT64_MAX}, the largest integer a vector database stores; store it as a string "
                "(the value as written), or keep uint64 values at most 2**63 - 1"
            )


def _accepted(arrow_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(arrow_type):
        return not pa.types.is_null(arrow_type.value_type) and _accepted(arrow_type.value_type)
    return (
        pa.types.is_null(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
    )
