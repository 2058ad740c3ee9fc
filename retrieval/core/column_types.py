"""Types of metadata columns read as text (CSV cells): inferred per column, or declared with `--column-types`.

A column's type is decided once, over all its cells, when the source is read; the index, the
embeddings files and the vector database then hold the same types. A value is what the user wrote:
inference takes a number type only when every cell is exactly the canonical text of its value, so
that the number, written back, is the cell again.

- `int` (int64): every non-empty cell is an integer's canonical text within int64 (`7`, `-12`, `0`;
  not `007`, `+44`, `-0` or `1_000`, whose zeros, sign or underscore the number would lose);
- `float` (float64): otherwise, every non-empty cell is an int's canonical text that float64 holds
  exactly, or the shortest text that reads back as its finite, non-integral float64 (Python's `repr`:
  `2.5`, `0.07`, `1e-05`, `-1.5e+300`); `1.10`, `1e3`, `1.0`, `.5`, `+5`, `1e-400` (0.0),
  `0.1000000000000000000001` (0.1) and `9007199254740993.0` (2**53) are not, so a column holding
  one of them stays text;
- `str`: otherwise (and a column with no non-empty cell).

An empty cell is null in every type. `path` is always `str`. A declaration (`price=float,sku=str`)
replaces inference for its columns, and reads a cell by its value: `+7` and `007` are the int 7,
`1.10` the float 1.1. A cell the declared type cannot hold exactly (`2.5` for int; `nan`,
`9007199254740995.0` or `1e-999` for float: float64 would store another number) is a one-line error
naming the column, the row and the value. `typed_cells` is that reading, for every path that turns
text into a typed column; `index add` reads the columns an index already has as the index's types
(`typed_table`'s `stored`), never by inference.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Literal, get_args

import pyarrow as pa

from retrieval.errors import UserError

__all__ = [
    "ARROW_TYPES",
    "ColumnType",
    "column_types_of",
    "infer_column_type",
    "kept_type_fix",
    "parse_column_types",
    "typed_cells",
    "typed_table",
]

ColumnType = Literal["int", "float", "str"]
ARROW_TYPES: dict[ColumnType, pa.DataType] = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
_TEXT_COLUMNS = ("path",)  # never numbers, whatever their cells look like
# ASCII digits only: `int()` and `float()` also read other scripts' digits (`int("1٣")` is 13).
_INTEGER = re.compile(r"0|-?[1-9][0-9]*")  # inferred: reads back as written
_DECLARED_INTEGER = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")  # a declared float column's cells
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MAX_INTEGER_DIGITS = 20


def column_types_of(schema: pa.Schema) -> dict[str, ColumnType]:
    """The columns of `schema` that hold one of the three types, by name (an index's own, for `index add`)."""
    kinds = {arrow: kind for kind, arrow in ARROW_TYPES.items()}
    return {field.name: kinds[field.type] for field in schema if field.type in kinds}


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
    if all(_INTEGER.fullmatch(cell) and _fits_int64(cell) for cell in values):
        return "int"
    if all(_canonical_float(cell) for cell in values):
        return "float"
    return "str"


def _canonical_float(cell: str) -> bool:
    """Whether float64 holds `cell` and writes it back as the same text: an exact int, or a non-integral `repr`."""
    if _INTEGER.fullmatch(cell):
        return _fits_int64(cell) and float(int(cell)) == int(cell)
    if not _FLOAT.fullmatch(cell):  # ASCII digits only (float() also reads `1_0`, `nan`, other scripts' digits)
        return False
    value = float(cell)
    return math.isfinite(value) and not value.is_integer() and repr(value) == cell


def typed_table(
    columns: Mapping[str, Sequence[str]],
    declared: Mapping[str, ColumnType] | None = None,
    source: str = "the CSV",
    stored: Mapping[str, ColumnType] | None = None,
) -> pa.Table:
    """The columns of text cells as an Arrow table, each column typed as declared or inferred; empty cells null.

    Args:
        columns: column name -> one text cell per row.
        declared: the types given for some columns (`parse_column_types`); a declared column the
            source lacks is an error (a misspelled name would otherwise be silently inferred).
        source: what errors call the source.
        stored: the types of an existing index's columns (`index add`): a column of the source that
            the index has is read as the index's type, never inferred; declaring it otherwise is an error.

    Raises:
        UserError: a declared column the source lacks or that the index stores as another type, or a
            cell that its declared or stored type cannot hold exactly.
    """
    declared, stored = dict(declared or {}), dict(stored or {})
    unknown = sorted(set(declared) - set(columns))
    if unknown:
        raise UserError(
            f"--column-types names {', '.join(map(repr, unknown))}, not a column of {source}; "
            f"its columns: {', '.join(columns)}"
        )
    for name, kind in declared.items():
        if stored.get(name, kind) != kind:
            raise UserError(
                f"--column-types declares {name!r} {kind}, but the index stores it as {stored[name]}; an index keeps "
                f"its column types (build it again with --column-types {name}={kind} to change one)"
            )
    arrays = {}
    for name, cells in columns.items():
        if name in stored and name not in _TEXT_COLUMNS:
            what = f"{source}: {name!r} goes into the index's {stored[name]} column"
            arrays[name] = typed_cells(name, cells, stored[name], what, kept_type_fix(name))
            continue
        kind = "str" if name in _TEXT_COLUMNS else declared.get(name) or infer_column_type(cells)
        fix = f"fix the cell or declare the column str (--column-types {name}=str)"
        arrays[name] = typed_cells(name, cells, kind, f"column {name!r} of {source} is declared {kind}", fix)
    return pa.table(arrays) if arrays else pa.table({})


def kept_type_fix(name: str) -> str:
    """How an error about a value an index's column cannot hold ends: the index keeps its types."""
    return (
        "fix the values; an index keeps the column types it was built with (to change one, "
        f"build the index again with --column-types {name}=str)"
    )


def typed_cells(name: str, cells: Sequence[str | None], kind: ColumnType, what: str, fix: str) -> pa.Array:
    """Text cells as an Arrow array of `kind`, each cell's exact value (`int` reads `+7` and `007` as 7, `float`
    reads `1.10` as 1.1); an empty cell or None is null.

    Args:
        name: the column, for errors.
        cells: one text cell per row.
        kind: the type to read every cell as.
        what: how an error starts (`column 'price' of x.csv is declared float`).
        fix: how an error ends: what the user can do.

    Raises:
        UserError: `{what}, but row N holds '<cell>' (<why>); {fix}` for the first cell `kind` cannot hold exactly.
    """
    if kind == "str":
        return pa.array([cell if cell != "" else None for cell in cells], pa.string())
    values: list[int | float | None] = []
    for row, cell in enumerate(cells, start=1):
        if cell is None or cell == "":
            values.append(None)
            continue
        problem = _int_problem(cell) if kind == "int" else _float_problem(cell)
        if problem is not None:
            raise UserError(f"{what}, but row {row} holds {cell[:40]!r} ({problem}); {fix}")
        values.append(int(cell) if kind == "int" else float(cell))
    return pa.array(values, ARROW_TYPES[kind])


def _int_problem(cell: str) -> str | None:
    """Why int64 cannot hold the integer `cell` (any sign and leading zeros: `007` is 7); None when it can."""
    if not _DECLARED_INTEGER.fullmatch(cell):
        return "not an integer in ASCII digits"
    return None if _fits_int64(cell) else "outside the 64-bit integer range"


def _float_problem(cell: str) -> str | None:
    """Why float64 cannot hold the decimal number `cell` exactly; None when it can: the cell's value is the float's
    shortest text (`1.10` is 1.1) or its exact binary value (`-9223372036854775808` is -2**63)."""
    if not _FLOAT.fullmatch(cell):
        return "not a decimal number in ASCII digits"
    value = float(cell)
    if not math.isfinite(value):
        return "not finite: JSON and the vector database cannot store it"
    if Decimal(cell) not in (Decimal(repr(value)), Decimal(value)):  # its shortest text, or its exact binary value
        return f"float64 would store {value!r}, another number"
    return None


def _fits_int64(cell: str) -> bool:
    """Whether the decimal integer `cell` is within int64 (at most 21 characters: Python refuses huge conversions)."""
    return len(cell) <= _MAX_INTEGER_DIGITS + 1 and _INT64_MIN <= int(cell) <= _INT64_MAX
