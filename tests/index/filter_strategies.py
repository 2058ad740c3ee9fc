"""Hypothesis strategies for the filter properties: metadata tables over every accepted column type, with edge
values, filters drawn from the filter grammar (in both spellings), and the plain-Python oracle of the rows.

Tables hold one column per drawn type (`retrieval.index.metadata_types`' list: bool, every integer width,
float16/32/64, string, large_string, null, a dictionary of strings) under drawn names: keywords of the
language, names with dots, spaces, brackets, backticks, newlines, other scripts. Cells are drawn from the
type's bounds, +/-0, subnormals, integers around 2**53 and 2**63, `'NaN'` as text, NFC and NFD forms of one
letter, empty and 10,000-character strings, and nulls. Filter values are drawn near the column's cells
(the same number as an int and as a float, one off, half off, the next float) so that exactness matters.
"""

from __future__ import annotations

import math
import operator
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import event
from hypothesis import strategies as st

from retrieval.index.filter_language import Filter, parse_filter, parse_where
from retrieval.index.metadata import RESERVED_COLUMNS

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
COLUMN_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint8": pa.uint8(),
    "uint16": pa.uint16(),
    "uint32": pa.uint32(),
    "uint64": pa.uint64(),
    "float16": pa.float16(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "string": pa.string(),
    "large_string": pa.large_string(),
    "null": pa.null(),
    "dictionary": pa.dictionary(pa.int32(), pa.string()),
}
NAMES = [
    "and", "or", "not", "in", "is", "null", "true", "NULL", "label", "path", "a.b", "unit price", "x[0]", "a.b[]",
    "k:v", "$n", "-x", "é", "日本", "prix_é", "a`b", "new\nline", " ", "0", "_", "ID", "e\u0301",
]  # fmt: skip
_LETTER = "\u00e9"  # é, NFC; its NFD form is two code points
EDGE_STRINGS = [
    "", " ", "NaN", "nan", "inf", "-0", "0", "1e3", "a", "b", "A", "a'b", 'a"b', "日本", "\x00", "x" * 10_000,
    unicodedata.normalize("NFC", _LETTER), unicodedata.normalize("NFD", _LETTER), "Å", "A\u030a", "\u212b",
]  # fmt: skip
_OPS = ("eq", "ne", "in", "nin", "lt", "lte", "gt", "gte", "is_null")
RANGES = ("lt", "lte", "gt", "gte")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "lte": operator.le,
    "gt": operator.gt,
    "gte": operator.ge,
}
_SYMBOL = {"eq": "=", "ne": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


@dataclass(frozen=True)
class Drawn:
    """A drawn metadata table (row i has id i) and what each column holds."""

    table: pa.Table
    kinds: dict[str, str]  # column -> a key of COLUMN_TYPES

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Each row as a dict with its `id`, the oracle's input."""
        return [{"id": i, **row} for i, row in enumerate(self.table.to_pylist())]


def _integer_cells(arrow_type: pa.DataType) -> st.SearchStrategy[int]:
    info = np.iinfo(arrow_type.to_pandas_dtype())
    low, high = int(info.min), min(int(info.max), INT64_MAX)  # uint64 past int64 is refused at build
    edges = [
        v
        for v in (low, high, low + 1, high - 1, 0, 1, -1, 2**53, 2**53 + 1, -(2**53) - 1, 2**63 - 1025)
        if low <= v <= high
    ]
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def _float_cells(width: int) -> st.SearchStrategy[float]:
    finfo = np.finfo({16: np.float16, 32: np.float32, 64: np.float64}[width])
    tiny = float(finfo.smallest_subnormal)
    edges = [0.0, -0.0, tiny, -tiny, float(finfo.tiny), float(finfo.max), -float(finfo.max), 0.1, 1.5, 2.0**11 + 1]
    edges += [2.0**53, 2.0**53 + 2, 9.2233720368547758e18] if width == 64 else []
    cast = {16: np.float16, 32: np.float32, 64: np.float64}[width]
    edges = [float(cast(v)) for v in edges if math.isfinite(float(cast(v)))]
    drawn = st.floats(width=width, allow_nan=False, allow_infinity=False)
    return st.one_of(st.sampled_from(edges), drawn)


def _string_cells() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(EDGE_STRINGS), st.text(max_size=6))


def cells(kind: str) -> st.SearchStrategy[Any]:
    """Non-null cells of a column of `kind` (a key of COLUMN_TYPES)."""
    arrow_type = COLUMN_TYPES[kind]
    if kind == "bool":
        return st.booleans()
    if kind == "null":
        return st.none()
    if pa.types.is_integer(arrow_type):
        return _integer_cells(arrow_type)
    if pa.types.is_floating(arrow_type):
        return _float_cells(arrow_type.bit_width)
    return _string_cells()


def column_names() -> st.SearchStrategy[str]:
    """Keyword and punctuated names, and short drawn ones; never `"` or `\\` (refused: `index export`), nor `id`,
    `rank` or `score` (refused at build: `RESERVED_COLUMNS`)."""
    drawn = st.text(min_size=1, max_size=5).filter(
        lambda n: '"' not in n and "\\" not in n and n not in RESERVED_COLUMNS
    )
    return st.one_of(st.sampled_from(NAMES), drawn)


@st.composite
def tables(draw: st.DrawFn, max_rows: int = 12) -> Drawn:
    """A table of 1 to `max_rows` rows and 1 to 5 columns of drawn types; cells null at a drawn rate."""
    rows = draw(st.integers(1, max_rows))
    kinds = draw(st.lists(st.sampled_from(sorted(COLUMN_TYPES)), min_size=1, max_size=5))
    names = draw(st.lists(column_names(), min_size=len(kinds), max_size=len(kinds), unique=True))
    null_rate = draw(st.sampled_from([0.0, 0.2, 0.6]))
    columns = {}
    for name, kind in zip(names, kinds, strict=True):
        pool = draw(st.lists(cells(kind), min_size=1, max_size=4))  # few distinct values: equal cells are common
        values = [None if draw(st.floats(0, 1)) < null_rate else draw(st.sampled_from(pool)) for _ in range(rows)]
        columns[name] = _array(values, kind)
    return Drawn(pa.table(columns), dict(zip(names, kinds, strict=True)))


def _array(values: list[Any], kind: str) -> pa.Array:
    if kind == "dictionary":
        return pa.array(values, pa.string()).dictionary_encode()
    if kind == "float16":
        mask = np.array([v is None for v in values])
        return pa.array(np.array([0 if v is None else v for v in values], np.float16), mask=mask)
    return pa.array(values, COLUMN_TYPES[kind])


def _family(kind: str) -> str:
    if kind == "bool":
        return "boolean"
    if kind in ("string", "large_string", "dictionary"):
        return "string"
    return "number" if kind != "null" else "any"


def _near_number(draw: st.DrawFn, present: list[Any]) -> int | float:
    """A number near one of `present` (or an edge): equal as int and float, one off, half off, the next float."""
    base = draw(st.sampled_from(present or [0]))
    choices: list[int | float] = [base, float(base), -0.0, 0, 2**53 + 1, INT64_MAX, INT64_MIN, 0.5]
    if float(base).is_integer() and abs(base) <= INT64_MAX:
        choices += [int(base), int(base) + 1, int(base) - 1, float(base) + 0.5, float(base) - 0.5]
    choices += [math.nextafter(float(base), math.inf), math.nextafter(float(base), -math.inf)]
    value = draw(st.sampled_from(choices))
    if isinstance(value, int):
        return min(max(value, INT64_MIN), INT64_MAX)
    return value if math.isfinite(value) else 0.0


def _value(draw: st.DrawFn, family: str, present: list[Any]) -> Any:
    if family == "any":
        family = draw(st.sampled_from(["number", "string", "boolean"]))
    if family == "boolean":
        return draw(st.booleans())
    if family == "string":
        return draw(st.one_of(st.sampled_from([*present, *EDGE_STRINGS] or [""]), st.text(max_size=3)))
    return _near_number(draw, [v for v in present if not isinstance(v, str)])


@dataclass(frozen=True)
class Cond:
    """`column op value [and op value]`: one or two operators on one column; `bare`: JSON's `{column: value}`."""

    column: str
    ops: tuple[tuple[str, Any], ...]
    bare: bool = False


@dataclass(frozen=True)
class Combined:
    """`and`, `or` or `not` of filters; `keys`: an and written as one JSON object of several keys."""

    how: str  # and, or, not, keys
    parts: tuple[Node, ...]


Node = Cond | Combined


@st.composite
def conditions(draw: st.DrawFn, data: Drawn) -> Cond:
    """One to two operators on one column (`id` included), with values near its cells."""
    column = draw(st.sampled_from([*data.kinds, "id"]))
    kind = data.kinds.get(column, "int64")
    family = _family(kind)
    present = [row[column] for row in data.rows if row[column] is not None]
    ops = [op for op in _OPS if family in ("number", "any") or op not in RANGES]
    drawn: list[tuple[str, Any]] = []
    for op in draw(st.lists(st.sampled_from(ops), min_size=1, max_size=2, unique=True)):
        if op == "is_null":
            drawn.append((op, draw(st.booleans())))
        elif op in ("in", "nin"):
            listed = family if family != "any" else draw(st.sampled_from(["number", "string", "boolean"]))
            drawn.append((op, [_value(draw, listed, present) for _ in range(draw(st.integers(1, 4)))]))
        else:
            drawn.append((op, _value(draw, family if family != "any" or op not in RANGES else "number", present)))
    return Cond(column, tuple(drawn), bare=[op for op, _ in drawn] == ["eq"] and draw(st.booleans()))


def filters(data: Drawn) -> st.SearchStrategy[Node]:
    """Filters of the grammar: conditions, and / or / not of them (and an and as several JSON keys), nested."""

    def combined(children: st.SearchStrategy[Node]) -> st.SearchStrategy[Node]:
        parts = st.lists(children, min_size=1, max_size=3).map(tuple)
        return st.one_of(
            st.builds(Combined, st.sampled_from(["and", "or"]), parts),
            st.builds(Combined, st.just("not"), children.map(lambda child: (child,))),
            st.builds(Combined, st.just("keys"), st.lists(children, min_size=2, max_size=3).map(tuple)),
        )

    return st.recursive(conditions(data), combined, max_leaves=8)


def oracle(node: Node, row: dict[str, Any]) -> bool:
    """Whether `row` passes: the documented semantics in plain Python (exact numbers; nulls pass no comparison)."""
    if isinstance(node, Cond):
        return all(_passes(row[node.column], op, value) for op, value in node.ops)
    if node.how == "or":
        return any(oracle(part, row) for part in node.parts)
    if node.how == "not":
        return not oracle(node.parts[0], row)
    return all(oracle(part, row) for part in node.parts)


def _passes(cell: Any, op: str, value: Any) -> bool:
    if op == "is_null":
        return (cell is None) == value
    if cell is None:
        return False
    if op in ("in", "nin"):
        return any(_equal(cell, v) for v in value) == (op == "in")
    if op == "eq":
        return _equal(cell, value)
    if op == "ne":
        return not _equal(cell, value)
    return bool(_COMPARE[op](cell, value))


def _equal(cell: Any, value: Any) -> bool:
    if isinstance(cell, bool) or isinstance(value, bool):  # Python's True == 1; a filter's booleans are not numbers
        return type(cell) is type(value) and cell == value
    return bool(cell == value)


def json_of(node: Node) -> dict[str, Any] | None:
    """The JSON spelling of `node`; None when it has none (a column named `and`, `or` or `not`)."""
    if isinstance(node, Cond):
        if node.column in ("and", "or", "not"):
            return None
        return {node.column: node.ops[0][1] if node.bare else dict(node.ops)}
    parts = [json_of(part) for part in node.parts]
    if any(part is None for part in parts):
        return None
    objects = [part for part in parts if part is not None]
    if node.how == "not":
        return {"not": objects[0]}
    if node.how == "keys" and len({key for obj in objects for key in obj}) == sum(len(obj) for obj in objects):
        return {key: value for obj in objects for key, value in obj.items()}
    return {"or" if node.how == "or" else "and": objects}


def where_of(node: Node) -> str | None:
    """The where-expression spelling of `node`; None when it has none (a name with a backtick, a string both quotes)."""
    if isinstance(node, Cond):
        texts = [_condition_text(node.column, op, value) for op, value in node.ops]
        return None if None in texts else " and ".join(str(text) for text in texts)
    parts = [where_of(part) for part in node.parts]
    if None in parts:
        return None
    if node.how == "not":
        return f"not ({parts[0]})"
    return "(" + f" {'or' if node.how == 'or' else 'and'} ".join(f"({text})" for text in parts) + ")"


def parsed(node: Node) -> Filter | None:
    """`node` as the toolkit parses it, from each spelling it has (both must agree); None when it has neither."""
    obj, text = json_of(node), where_of(node)
    from_json = None if obj is None else parse_filter(obj)
    from_text = None if text is None else parse_where(text)
    assert from_json is None or from_text is None or from_json == from_text, (obj, text)
    return from_json if from_json is not None else from_text


def _condition_text(column: str, op: str, value: Any) -> str | None:
    if "`" in column:
        return None
    name = f"`{column}`"
    if op == "is_null":
        return f"{name} is {'' if value else 'not '}null"
    if op in ("in", "nin"):
        literals = [_literal(v) for v in value]
        if None in literals:
            return None
        return f"{name} {'in' if op == 'in' else 'not in'} ({', '.join(str(text) for text in literals)})"
    literal = _literal(value)
    return None if literal is None else f"{name} {_SYMBOL[op]} {literal}"


def _literal(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"'{value}'" if "'" not in value else f'"{value}"' if '"' not in value else None
    return repr(value)


def record_coverage(data: Drawn, nodes: list[Node]) -> None:
    """Hypothesis events for the column types and operators drawn, so `--hypothesis-show-statistics` shows reach."""
    for kind in set(data.kinds.values()):
        event(f"column type {kind}")
    stack: list[Node] = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, Cond):
            for op, _ in node.ops:
                event(f"operator {op}{' on id' if node.column == 'id' else ''}")
        else:
            event(f"combined with {node.how}")
            stack.extend(node.parts)


def passing_ids(answer: tuple[np.ndarray, np.ndarray]) -> list[int]:
    """The ids a `search` of one query returned, padding left out, in order."""
    ids = answer[1][0]
    return [int(i) for i in ids if i >= 0]
