"""Types of metadata columns read as text (CSV cells): inferred per column, or declared with `--column-types`.

A column's type is decided once, over all its cells, when the source is read; the index, the
embeddings files and the vector database then hold the same types:

- `int` (int64): every non-empty cell is an integer within int64 without leading zeros (`7`,
  `-12`; not `007`, whose zeros an integer would lose);
- `float` (float64): otherwise, every non-empty cell is a finite decimal number without leading
  zeros either (`2.5`, `1e3`, `0.5`; not `nan`, `inf`, `1_000`);
- `str`: otherwise (and a column with no non-empty cell).

An empty cell is null in every type. `path` is always `str`. A declaration
(`price=float,sku=str`) replaces inference for its columns; a cell that does not fit the
declared type is a one-line error naming the column and the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

import pyarrow as pa

from retrieval.errors import UserError

__all__ = ["ARROW_TYPES", "ColumnType", "infer_column_type", "parse_column_types", "typed_table"]

ColumnType = Literal["int", "float", "str"]
ARROW_TYPES: dict[str, pa.DataType] = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
_TEXT_COLUMNS = ("path",)  # never numbers, whatever their cells look like
_INTEGER = re.compile(r"[-+]?(?:0|[1-9]\d*)")
_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")  # a declared float column's cells
_INFERRED_FLOAT = re.compile(r"[-+]?(?:(?:0|[1-9]\d*)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")  # no leading zeros
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MAX_INTEGER_DIGITS = 20


def parse_column_types(text: str | None) -> dict[str, ColumnType]:
    """`--column-types price=float,sku=str` as `{"price": "float", "sku": "str"}`; None or "" as `{}`.

    Raises:
        UserError: an entry without `=`, an unknown type, a column named twice, or `path` declared non-str.
    """
    declared: dict[str, ColumnType] = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        name, equals, kind = (part.strip() for part in entry.partition("="))
        if not equals or not name or kind not in get_args(ColumnType):
            raise UserError(
                f"--column-types entry {entry.strip()!r} must be NAME=TYPE with TYPE one of int, float, str "
                "(e.g. --column-types price=float,sku=str)"
            )
        if name in declared:
            raise UserError(f"--column-types names {name!r} twice; give each column one type")
        if name in _TEXT_COLUMNS and kind != "str":
            raise UserError(f"--column-types: {name!r} holds file paths and is always str")
        declared[name] = kind  # type: ignore[assignment]  # checked against ColumnType above
    return declared


def infer_column_type(cells: Sequence[str]) -> ColumnType:
    """The type of a column of text cells by the rule of the module docstring (empty cells ignored)."""
    values = [cell for cell in cells if cell != ""]
    if not values:
        return "str"
    if all(_is_int64(cell) for cell in values):
        return "int"
    if all(_INFERRED_FLOAT.fullmatch(cell) and _is_finite(cell) for cell in values):
        return "float"
    return "str"


def typed_table(
    columns: Mapping[str, Sequence[str]], declared: Mapping[str, ColumnType] | None = None, source: str = "the CSV"
) -> pa.Table:
    """The columns of text cells as an Arrow table, each column typed as declared or inferred; empty cells null.

    Args:
        columns: column name -> one text cell per row.
        declared: the types given for some columns (`parse_column_types`); a declared column the
            source lacks is an error (a misspelled name would otherwise be silently inferred).
        source: what errors call the source.

    Raises:
        UserError: a declared column the source lacks, or a cell that is not a value of its declared type.
    """
    declared = dict(declared or {})
    unknown = sorted(set(declared) - set(columns))
    if unknown:
        raise UserError(
            f"--column-types names {', '.join(map(repr, unknown))}, not a column of {source}; "
            f"its columns: {', '.join(columns)}"
        )
    arrays = {}
    for name, cells in columns.items():
        kind = "str" if name in _TEXT_COLUMNS else declared.get(name) or infer_column_type(cells)
        arrays[name] = _typed_array(name, cells, kind, source)
    return pa.table(arrays) if arrays else pa.table({})


def _typed_array(name: str, cells: Sequence[str], kind: str, source: str) -> pa.Array:
    if kind == "str":
        return pa.array([cell if cell != "" else None for cell in cells], pa.string())
    parse = int if kind == "int" else float
    fits = _fits_int64 if kind == "int" else (lambda cell: bool(_FLOAT.fullmatch(cell)) and _is_finite(cell))
    values: list[int | float | None] = []
    for cell in cells:
        if cell == "":
            values.append(None)
        elif not fits(cell):
            raise UserError(
                f"column {name!r} of {source} is declared {kind}, but holds {cell[:40]!r}; "
                f"fix the cell or declare the column str (--column-types {name}=str)"
            )
        else:
            values.append(parse(cell))
    return pa.array(values, ARROW_TYPES[kind])


def _is_int64(cell: str) -> bool:
    """Inference's integers: no leading zeros (their zeros would be lost), within int64."""
    return bool(_INTEGER.fullmatch(cell)) and _fits_int64(cell)


def _fits_int64(cell: str) -> bool:
    """A declared int column's cells: any decimal integer within int64 (`007` is 7)."""
    if len(cell) > _MAX_INTEGER_DIGITS + 1 or not re.fullmatch(r"[-+]?\d+", cell):
        return False
    return _INT64_MIN <= int(cell) <= _INT64_MAX


def _is_finite(cell: str) -> bool:
    return abs(float(cell)) != float("inf")
