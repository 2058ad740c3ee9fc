"""Types of metadata columns read as text (CSV cells): inferred per column, or declared with `--column-types`.

A column's type is decided once, over all its cells, when the source is read; the index, the
embeddings files and the vector database then hold the same types. Inference never changes what a
cell says: a type is chosen only when no cell would lose a digit, a sign or a leading zero to it.

- `int` (int64): every non-empty cell is an integer within int64 in ASCII digits, without a `+`
  or leading zeros (`7`, `-12`; not `007` or `+44`, whose zeros and sign an integer would lose);
- `float` (float64): otherwise, every non-empty cell is a finite decimal number in ASCII digits,
  without a `+` or leading zeros (`2.5`, `1e3`, `0.5`; not `nan`, `inf`, `1_000`, `1٣`), and every
  integer among them is within int64 and held exactly by float64 (`9007199254740993` beside `0.5`,
  or 25-digit codes, would lose digits);
- `str`: otherwise (and a column with no non-empty cell).

An empty cell is null in every type. `path` is always `str`. A declaration
(`price=float,sku=str`) replaces inference for its columns; it reads `+7` and `007` as 7, but a
cell that does not fit the declared type (`nan` or `2**53 + 1` for float, `2.5` for int) is a
one-line error naming the column and the value. `typed_cells` is that reading, for every path
that turns text into a typed column (`index add` into an index's existing types included).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, get_args

import pyarrow as pa

from retrieval.errors import UserError

__all__ = ["ARROW_TYPES", "ColumnType", "infer_column_type", "parse_column_types", "typed_cells", "typed_table"]

ColumnType = Literal["int", "float", "str"]
ARROW_TYPES: dict[str, pa.DataType] = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
_TEXT_COLUMNS = ("path",)  # never numbers, whatever their cells look like
# ASCII digits only: `int()` and `float()` also read other scripts' digits (`int("1٣")` is 13).
_INTEGER = re.compile(r"0|-?[1-9][0-9]*")  # inferred: reads back as written
_DECLARED_INTEGER = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")  # a declared float column's cells
_INFERRED_FLOAT = re.compile(r"-?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")  # no leading 0 or +
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
    if all(_INTEGER.fullmatch(cell) and _fits_int64(cell) for cell in values):
        return "int"
    if all(_INFERRED_FLOAT.fullmatch(cell) and _float_problem(cell) is None for cell in values):
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
        fix = f"fix the cell or declare the column str (--column-types {name}=str)"
        arrays[name] = typed_cells(name, cells, kind, f"column {name!r} of {source} is declared {kind}", fix)
    return pa.table(arrays) if arrays else pa.table({})


def typed_cells(name: str, cells: Sequence[str | None], kind: ColumnType, what: str, fix: str) -> pa.Array:
    """Text cells as an Arrow array of `kind` (`int` accepts `+7` and `007`); an empty cell or None is null.

    Args:
        name: the column, for errors.
        cells: one text cell per row.
        kind: the type to read every cell as.
        what: how an error starts (`column 'price' of x.csv is declared float`).
        fix: how an error ends: what the user can do.

    Raises:
        UserError: `{what}, but holds '<cell>' (<why>); {fix}` for the first cell `kind` cannot hold exactly.
    """
    if kind == "str":
        return pa.array([cell if cell != "" else None for cell in cells], pa.string())
    values: list[int | float | None] = []
    for cell in cells:
        if cell is None or cell == "":
            values.append(None)
            continue
        problem = _int_problem(cell) if kind == "int" else _float_problem(cell)
        if problem is not None:
            raise UserError(f"{what}, but holds {cell[:40]!r} ({problem}); {fix}")
        values.append(int(cell) if kind == "int" else float(cell))
    return pa.array(values, ARROW_TYPES[kind])


def _int_problem(cell: str) -> str | None:
    """Why int64 cannot hold the integer `cell` (any sign and leading zeros: `007` is 7); None when it can."""
    if not _DECLARED_INTEGER.fullmatch(cell):
        return "not an integer in ASCII digits"
    return None if _fits_int64(cell) else "outside the 64-bit integer range"


def _float_problem(cell: str) -> str | None:
    """Why float64 cannot hold the decimal number `cell` as written; None when it can."""
    if not _FLOAT.fullmatch(cell):
        return "not a decimal number in ASCII digits"
    if abs(float(cell)) == float("inf"):
        return "not finite: JSON and the vector database cannot store it"
    if _DECLARED_INTEGER.fullmatch(cell) and not (_fits_int64(cell) and float(int(cell)) == int(cell)):
        return "an integer that float64 would round"
    return None


def _fits_int64(cell: str) -> bool:
    """Whether the decimal integer `cell` is within int64 (at most 21 characters: Python refuses huge conversions)."""
    return len(cell) <= _MAX_INTEGER_DIGITS + 1 and _INT64_MIN <= int(cell) <= _INT64_MAX
