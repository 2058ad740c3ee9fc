"""Filters on metadata columns: comparisons, membership and null tests, combined with and, or, not.

One `Filter` object, two spellings that parse to equal objects:

- a where-expression (CLI `--where`, `/search` `filter` as a string):
  `label in (3, 5) and (price < 50 or shop != 'a') and not sku is null`.
  Operators `=` `==` `!=` `<>` `<` `<=` `>` `>=`, `in (..)`, `not in (..)`, `is null`,
  `is not null`; `not` binds tighter than `and`, `and` tighter than `or`; parentheses group.
  Keywords in any case; values are integers (int64), floats, quoted strings (`'..'` or `".."`,
  no escapes) and `true`/`false`. A column name that is not a plain identifier goes in
  backticks: `` `unit price` < 5 ``. An empty expression passes everything.
- a JSON object (`/search` `filter`, or a JSON file given to `--where`): each key a column and
  its condition, all of them combined with and: `{"label": {"in": [3, 5]}, "price": {"lt": 50},
  "shop": "a"}`. A bare value means `eq`; operators `eq ne in nin lt lte gt gte is_null`
  (`{"is_null": true}`); several operators on one column are several conditions. The keys
  `and` / `or` take a list of such objects, `not` one object: `{"or": [{"label": 3}, {"price":
  {"lt": 50}}]}`.

Nulls: a comparison (`=`, `!=`, `<`, `in`, `not in`, ...) never passes a null value; `not X`
passes exactly the rows `X` does not (two-valued logic, as Qdrant's `must_not`), so
`not (price < 50)` passes rows without a price. `is null` tests for a missing value.

Limits, so that a request cannot hold the parser or the server: a filter is at most
`MAX_FILTER_CHARS` characters (JSON: its compact serialization), nested at most `MAX_DEPTH`
deep; parsing is linear in its length. Integers must fit int64.

Columns and types are checked against the metadata when the filter is applied (`Filter.check`):
numbers compare with numeric columns, strings with string columns, booleans with boolean columns
(any value with a column of type null, which passes no comparison). Ranges (`<` `<=` `>` `>=`)
compare numbers only: a vector database has no order on strings, so every backend refuses them.
Numbers compare by their exact values, whatever their spelling: `3`, `3.0` and `3e0` are the
same number, `-0.0` is `0`, `x < 9007199254740993` on an int64 column is exact (the bound never
passes through a float), and a fraction compares with an integer column as a number would
(`label > 0.5` is `label >= 1`). `typed_condition` writes each condition's numbers in its
column's own type once, and every backend (FAISS, Qdrant) evaluates that form.

Text (column names and string values) must be Unicode that UTF-8 can encode: a lone surrogate
(`"\\ud800"` in JSON) is refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeAlias, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval.errors import UserError, short_repr

__all__ = [
    "MAX_DEPTH",
    "MAX_FILTER_CHARS",
    "Condition",
    "Filter",
    "Node",
    "Not",
    "Op",
    "load_filter",
    "parse_filter",
    "parse_where",
    "typed_condition",
]

Op = Literal["eq", "ne", "in", "nin", "lt", "lte", "gt", "gte", "is_null"]
Scalar = str | int | float | bool
MAX_FILTER_CHARS = 64 * 1024
MAX_DEPTH = 32

_OPS: tuple[str, ...] = get_args(Op)
_LIST_OPS = ("in", "nin")
_RANGE_SYMBOLS = {"lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
_SYMBOLS: dict[str, Op] = {
    "=": "eq",
    "==": "eq",
    "!=": "ne",
    "<>": "ne",
    "<": "lt",
    "<=": "lte",
    ">": "gt",
    ">=": "gte",
}
_COMPARE = {
    "eq": pc.equal,
    "ne": pc.not_equal,
    "lt": pc.less,
    "lte": pc.less_equal,
    "gt": pc.greater,
    "gte": pc.greater_equal,
}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_COMBINERS = ("and", "or", "not")  # the JSON keys that are not columns


@dataclass(frozen=True)
class Condition:
    """`column op value`: one test on one metadata column.

    Attributes:
        column: the metadata column's name.
        op: `eq`, `ne`, `in`, `nin`, `lt`, `lte`, `gt`, `gte` or `is_null`.
        value: a scalar (str, int, float or bool); a non-empty tuple of scalars for `in`/`nin`;
            for `is_null`, True (is null) or False (is not null).
    """

    column: str
    op: Op
    value: Any

    def __post_init__(self) -> None:
        _check_text(self.column, "a filter column name")
        if self.op not in _OPS:
            raise UserError(f"filter on {self.column!r}: unknown operator {self.op!r}; use one of {', '.join(_OPS)}")
        if self.op == "is_null":
            if not isinstance(self.value, bool):
                raise UserError(f"filter on {self.column!r}: 'is_null' takes true or false, got {self.value!r}")
        elif self.op in _LIST_OPS:
            if not isinstance(self.value, tuple) or not self.value:
                raise UserError(f"filter on {self.column!r}: '{self.op}' takes a non-empty list of values")
            kinds = {_kind_of_value(self.column, v) for v in self.value}
            if len(kinds) > 1:
                raise UserError(f"filter on {self.column!r}: '{self.op}' values mix {' and '.join(sorted(kinds))}")
        elif _kind_of_value(self.column, self.value) != "number" and self.op in _RANGE_SYMBOLS:
            raise UserError(
                f"filter on {self.column!r}: '{_RANGE_SYMBOLS[self.op]}' ({self.op}) compares numbers; strings and "
                "booleans take "
                "=, !=, in and not in (a vector database has no order on text)"
            )

    @property
    def kind(self) -> str | None:
        """`number`, `string` or `boolean`: the type of column this condition can test; None for `is_null` (any)."""
        if self.op == "is_null":
            return None
        first = self.value[0] if self.op in _LIST_OPS else self.value
        return _kind_of_value(self.column, first)

    def mask(self, column: pa.ChunkedArray) -> np.ndarray:
        """`(N,)` bool: which values of `column` pass (a null passes `is_null` only), compared exactly."""
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        typed = typed_condition(self, column.type)
        if typed is None:
            return np.zeros(len(column), dtype=bool)
        if typed.op == "is_null":
            passed = pc.is_null(column) if typed.value else pc.is_valid(column)
            return np.asarray(passed.to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_null(column.type):  # a column without values: no comparison passes
            return np.zeros(len(column), dtype=bool)
        if pa.types.is_floating(column.type):
            # float64 holds every float32 exactly; adding +0.0 turns -0.0 into 0.0, which hashing (`is_in`) tells apart
            column = pc.add(column.cast(pa.float64()), 0.0)
        if typed.op in _LIST_OPS:
            passed = pc.is_in(column, value_set=pa.array(list(typed.value), column.type))
            if typed.op == "nin":
                passed = pc.and_(pc.invert(passed), pc.is_valid(column))
        else:
            passed = _COMPARE[typed.op](column, pa.scalar(typed.value, column.type))
        return np.asarray(pc.fill_null(passed, False).to_numpy(zero_copy_only=False), dtype=bool)


def typed_condition(condition: Condition, column_type: pa.DataType) -> Condition | None:
    """`condition` with its numbers written in the numeric type of its column, so that comparing is exact.

    Every backend evaluates this form, so they agree on every value: an integer column gets
    integers within its type's range (a fraction becomes the integer bound it is equivalent to:
    `> 0.5` is `>= 1`; `= 2.5` passes nothing) and its ranges become `lt` or `gte`; a float column
    gets floats (`-0.0` as `0.0`; an integer no float64 holds, such as 2**53 + 1, becomes the
    neighbouring float bound, or passes nothing for `=`). A condition that passes every non-null
    value becomes `is_null` false; one that passes nothing becomes None. Conditions on strings
    and booleans, and `is_null`, come back as they are.
    """
    if condition.kind != "number":
        return condition
    if pa.types.is_dictionary(column_type):
        column_type = column_type.value_type
    column, op = condition.column, condition.op
    every = Condition(column, "is_null", False)
    if op in ("eq", "ne", "in", "nin"):
        listed = condition.value if op in _LIST_OPS else (condition.value,)
        kept = tuple(v for v in (_equal_value(value, column_type) for value in listed) if v is not None)
        if not kept:
            return None if op in ("eq", "in") else every
        return Condition(column, op, kept if op in _LIST_OPS else kept[0])
    if pa.types.is_integer(column_type):
        return _integer_range(condition, column_type, every)
    return Condition(column, *_float_range(op, condition.value))


def _equal_value(value: int | float, column_type: pa.DataType) -> int | float | None:
    """`value` in the column's type when some value of that type equals it; None when none does."""
    if pa.types.is_integer(column_type):
        low, high = _integer_limits(column_type)
        if isinstance(value, float) and not value.is_integer():
            return None
        number = int(value)
        return number if low <= number <= high else None
    if isinstance(value, int) and float(value) != value:  # Python compares int and float exactly
        return None
    return float(value) + 0.0  # -0.0 -> 0.0


def _integer_range(condition: Condition, column_type: pa.DataType, every: Condition) -> Condition | None:
    """A range on an integer column as `x < U` or `x >= L` with integer bounds inside the type's range."""
    value, op = condition.value, condition.op
    low, high = _integer_limits(column_type)
    if op in ("lt", "lte"):  # x < U
        upper = math.ceil(value) if op == "lt" else math.floor(value) + 1
        return every if upper > high else None if upper <= low else Condition(condition.column, "lt", upper)
    lower = math.floor(value) + 1 if op == "gt" else math.ceil(value)  # x >= L
    return every if lower <= low else None if lower > high else Condition(condition.column, "gte", lower)


def _float_range(op: Op, value: int | float) -> tuple[Op, float]:
    """A range on a float column with a float bound: an integer no float64 holds becomes the float next to it."""
    bound = float(value)
    if bound == value:
        return op, bound + 0.0
    below = bound if bound < value else math.nextafter(bound, -math.inf)  # the largest float under `value`
    if op in ("lt", "lte"):
        return "lte", below
    return "gte", math.nextafter(below, math.inf)


def _integer_limits(column_type: pa.DataType) -> tuple[int, int]:
    """The values an integer column holds: its type's range, uint64's cut at 2**63 - 1 (an index stores no more,
    `retrieval.index.metadata_types`), so that a typed bound is an int64, as every condition's is."""
    limits = np.iinfo(column_type.to_pandas_dtype())
    return int(limits.min), min(int(limits.max), _INT64_MAX)


@dataclass(frozen=True)
class Not:
    """`not operand`: the rows `operand` does not pass (nulls included)."""

    operand: Node


@dataclass(frozen=True)
class Filter:
    """Conditions and sub-filters combined with AND (or OR); no conditions: every row passes.

    Attributes:
        conditions: the conditions, `Not`s and nested filters, in the order they were written.
        combine: `and` (every one passes) or `or` (at least one does).
    """

    conditions: tuple[Node, ...] = ()
    combine: Literal["and", "or"] = "and"

    def leaves(self) -> Iterator[Condition]:
        """Every `Condition` in the filter, at any depth (iterative: depth is bounded, but no stack is needed)."""
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            if isinstance(node, Condition):
                yield node
            elif isinstance(node, Not):
                stack.append(node.operand)
            else:
                stack.extend(reversed(node.conditions))

    def check(self, schema: pa.Schema) -> None:
        """Raise `UserError` if a condition names a column `schema` lacks or compares it with the wrong type."""
        for condition in self.leaves():
            if condition.column not in schema.names:
                columns = ", ".join(schema.names)
                raise UserError(f"filter column {condition.column!r} is not in the metadata; columns: {columns}")
            if condition.kind is None:
                continue
            column_kind = _kind_of_type(schema.field(condition.column).type)
            if column_kind == "null":  # no values: any comparison is well typed, and passes nothing
                continue
            if column_kind is None:
                raise UserError(
                    f"filter column {condition.column!r} has type {schema.field(condition.column).type}; "
                    "filters compare numbers, strings and booleans only"
                )
            if column_kind != condition.kind:
                quoted = f"; write it as a number: {condition.column} = 3" if column_kind == "number" else ""
                hint = f"; quote it: {condition.column} = '3'" if column_kind == "string" else quoted
                raise UserError(
                    f"filter on {condition.column!r}: the column holds {column_kind}s, "
                    f"the filter compares it with a {condition.kind} ({condition.value!r}){hint}"
                )

    def mask(self, table: pa.Table) -> np.ndarray:
        """`(num_rows,)` bool: the rows of `table` that pass (vectorized, pyarrow.compute)."""
        self.check(table.schema)
        return _mask(self, table)


Node: TypeAlias = "Condition | Not | Filter"


def _mask(node: Node, table: pa.Table) -> np.ndarray:
    """The rows of `table` passing `node` (recursion depth at most `MAX_DEPTH`: parsers refuse deeper)."""
    if isinstance(node, Condition):
        return node.mask(table[node.column])
    if isinstance(node, Not):
        return ~_mask(node.operand, table)
    passed = np.full(table.num_rows, node.combine == "and", dtype=bool)
    for child in node.conditions:
        if node.combine == "and":
            passed &= _mask(child, table)
        else:
            passed |= _mask(child, table)
    return passed


def _combined(nodes: list[Node], combine: Literal["and", "or"]) -> Node:
    """`nodes` joined by `combine`: nested joins of the same kind flattened, a single node returned as it is."""
    flat: list[Node] = []
    for node in nodes:
        if isinstance(node, Filter) and (node.combine == combine or len(node.conditions) == 1):
            flat.extend(node.conditions)
        else:
            flat.append(node)
    return flat[0] if len(flat) == 1 else Filter(tuple(flat), combine)


def _as_filter(node: Node) -> Filter:
    return node if isinstance(node, Filter) else Filter((node,))


def parse_filter(obj: Mapping[str, Any]) -> Filter:
    """The filter of a JSON object: `{"label": {"in": [3, 5]}, "or": [{"price": {"lt": 50}}, {"shop": "a"}]}`.

    Raises:
        UserError: not an object, an unknown operator, a value of the wrong shape, nested over
            `MAX_DEPTH`, or over `MAX_FILTER_CHARS` characters as compact JSON.
    """
    if not isinstance(obj, Mapping):
        raise UserError(f"a filter must be a JSON object of column: condition, got {type(obj).__name__}")
    try:
        size = len(json.dumps(obj, separators=(",", ":")))
    except (TypeError, ValueError, RecursionError) as exc:
        _json_node(obj, 1)  # names the value that cannot be written (an integer of thousands of digits), if it can
        raise UserError(f"a filter must be plain JSON: {str(exc).splitlines()[0]}") from exc
    _check_size(size, "as compact JSON")
    return _as_filter(_json_node(obj, 1))


def _json_node(obj: Any, depth: int) -> Node:
    """The node of one JSON object: its columns' conditions and its and/or/not keys, joined by and."""
    if depth > MAX_DEPTH:
        raise UserError(f"filter is nested more than {MAX_DEPTH} deep; flatten it")
    if not isinstance(obj, Mapping):
        raise UserError(f"a filter inside and/or/not must be a JSON object, got {short_repr(obj)}")
    nodes: list[Node] = []
    for key, spec in obj.items():
        if key in ("and", "or"):
            if not isinstance(spec, list) or not spec:
                raise UserError(f'filter "{key}" takes a non-empty list of filter objects, got {short_repr(spec)}')
            nodes.append(_combined([_json_node(item, depth + 1) for item in spec], key))
        elif key == "not":
            nodes.append(Not(_json_node(spec, depth + 1)))
        else:
            nodes.extend(_column_conditions(key, spec))
    if not nodes:
        if depth > 1:
            raise UserError("an empty filter object inside and/or/not; give it a condition")
        return Filter(())
    return _combined(nodes, "and")


def _column_conditions(column: str, spec: Any) -> list[Node]:
    """The conditions of `{column: spec}`: a bare value (`eq`) or an object of operators."""
    if not isinstance(spec, Mapping):
        if isinstance(spec, (list, tuple)):
            raise UserError(f'filter on {column!r}: a list needs an operator, e.g. {{"{column}": {{"in": [...]}}}}')
        if spec is None:
            raise UserError(
                f"filter on {column!r}: values are numbers, strings or true/false, got None; "
                f'test for a missing value with {{"{column}": {{"is_null": true}}}}'
            )
        return [Condition(column, "eq", spec)]
    if not spec:
        raise UserError(f"filter on {column!r}: empty condition; give an operator among {', '.join(_OPS)}")
    conditions: list[Node] = []
    for op, value in spec.items():
        if op not in _OPS:
            raise UserError(f"filter on {column!r}: unknown operator {op!r}; use one of {', '.join(_OPS)}")
        if op in _LIST_OPS:
            if not isinstance(value, (list, tuple)):
                raise UserError(f"filter on {column!r}: '{op}' takes a list of values, got {short_repr(value)}")
            value = tuple(value)
        conditions.append(Condition(column, op, value))
    return conditions


def parse_where(text: str) -> Filter:
    """The filter of a where-expression: `label in (3, 5) and (price < 50 or shop = 'a')`, in time linear in its length.

    Raises:
        UserError: a syntax error naming the offending token and its position, an expression over
            `MAX_FILTER_CHARS` characters, or parentheses and `not`s nested over `MAX_DEPTH` deep.
    """
    _check_size(len(text), "")
    return _WhereParser(text).parse()


def load_filter(text_or_path: str) -> Filter:
    """A filter from the CLI: a path to a JSON file (an existing file or a `.json` name), else a where-expression.

    Raises:
        UserError: a missing or malformed JSON file, or a bad expression.
    """
    path = Path(text_or_path)
    looks_like_file = text_or_path.strip().lower().endswith(".json")
    if not (looks_like_file or _is_file(path)):
        return parse_where(text_or_path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read filter file {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"filter file {path} is not valid JSON: {exc}") from exc
    except (ValueError, RecursionError) as exc:  # digits past Python's int limit, nesting past its stack
        raise UserError(f"filter file {path} is not usable JSON: {str(exc).splitlines()[0]}") from exc
    return parse_filter(obj)


def _check_size(size: int, unit: str) -> None:
    if size > MAX_FILTER_CHARS:
        raise UserError(
            f"filter is {size:,} characters{' ' + unit if unit else ''}, over the limit of {MAX_FILTER_CHARS:,} "
            "(64 KiB); use fewer conditions, e.g. a range instead of a long 'in' list, or a metadata column"
        )


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a long expression is not a valid file name on every system
        return False


def _kind_of_value(column: str, value: Any) -> str:
    """`boolean`, `number` or `string`; `UserError` for anything else (None, lists, NaN, integers past int64)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise UserError(f"filter on {column!r}: {short_repr(value)} is outside the 64-bit integer range")
        return "number"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UserError(f"filter on {column!r}: {value!r} is not a finite number")
        return "number"
    if isinstance(value, str):
        _check_text(value, f"filter on {column!r}: a string value")
        return "string"
    raise UserError(f"filter on {column!r}: values are numbers, strings or true/false, got {short_repr(value)}")


def _check_text(text: str, what: str) -> None:
    """`UserError` for text that UTF-8 cannot encode (a lone surrogate), which no column can hold or be named."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserError(
            f"{what} holds {ascii(text[exc.start : exc.end])}, a lone surrogate, not a character; send valid Unicode"
        ) from None


def _kind_of_type(arrow_type: pa.DataType) -> str | None:
    """`boolean`, `number`, `string` or `null` (a column without values): what a column holds; None for other types."""
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_null(arrow_type):
        return "null"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return "number"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    return None


# One pass over the text: every alternative starts where the previous token ended, so scanning is
# linear; `bad` catches the first character no token starts with. Numbers are ASCII digits only (`int`
# and `float` would read `٣` as 3); a name starts with a letter or `_` of any script (`日本`, `prix_é`).
_TOKEN = re.compile(
    r"""(?P<space>\s+)
    | (?P<number>[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?(?![\w.]))
    | (?P<string>'[^']*'|"[^"]*")
    | (?P<name>[^\W\d][\w.]*|`[^`]+`)
    | (?P<symbol><=|>=|==|!=|<>|=|<|>|\(|\)|,)
    | (?P<bad>\S+?(?=\s|$|[()=<>,])|\S+)
    """,
    re.VERBOSE,
)
_KEYWORDS = ("and", "or", "not", "in", "is", "null", "true", "false")
_MAX_INTEGER_DIGITS = 20  # int64 has 19; more cannot fit, and Python refuses to convert thousands


@dataclass(frozen=True)
class _Token:
    kind: str  # number, string, name, symbol, end
    text: str
    position: int  # 1-based character position, for messages

    def is_word(self, word: str) -> bool:
        return self.kind == "name" and self.text.lower() == word


class _WhereParser:
    """Recursive descent, one token of look-ahead; recursion only for parentheses and `not` (bounded by MAX_DEPTH).

    or_expr := and_expr ('or' and_expr)*;  and_expr := unary ('and' unary)*;
    unary := 'not' unary | '(' or_expr ')' | condition
    """

    def __init__(self, text: str) -> None:
        self._tokens = _tokenize(text)
        self._at = 0
        self._depth = 0

    def parse(self) -> Filter:
        if self._peek().kind == "end":
            return Filter(())
        node = self._or()
        token = self._peek()
        if token.kind != "end":
            self._fail(token, "expected 'and', 'or' or the end of the expression")
        return _as_filter(node)

    def _or(self) -> Node:
        nodes = [self._and()]
        while self._peek().is_word("or"):
            self._next()
            nodes.append(self._and())
        return _combined(nodes, "or")

    def _and(self) -> Node:
        nodes = [self._unary()]
        while self._peek().is_word("and"):
            self._next()
            nodes.append(self._unary())
        return _combined(nodes, "and")

    def _unary(self) -> Node:
        token = self._peek()
        if token.is_word("not") or (token.kind == "symbol" and token.text == "("):
            self._depth += 1
            if self._depth > MAX_DEPTH:
                self._fail(token, f"parentheses and 'not' nested at most {MAX_DEPTH} deep")
            self._next()
            if token.is_word("not"):
                node: Node = Not(self._unary())
            else:
                node = self._or()
                self._expect_symbol(")")
            self._depth -= 1
            return node
        return self._condition()

    def _condition(self) -> Condition:
        token = self._next()
        if token.kind != "name" or token.text.lower() in _KEYWORDS:
            self._fail(token, "expected a column name")
        column = token.text[1:-1] if token.text.startswith("`") else token.text
        operator = self._next()
        if operator.kind == "symbol" and operator.text in _SYMBOLS:
            return Condition(column, _SYMBOLS[operator.text], self._value())
        if operator.is_word("in"):
            return Condition(column, "in", self._value_list())
        if operator.is_word("not"):
            self._expect_keyword("in")
            return Condition(column, "nin", self._value_list())
        if operator.is_word("is"):
            negated = self._peek().is_word("not")
            if negated:
                self._next()
            self._expect_keyword("null")
            return Condition(column, "is_null", not negated)
        self._fail(operator, f"expected an operator (= != < <= > >= in, not in, is null) after {token.text!r}")

    def _value_list(self) -> tuple[Scalar, ...]:
        self._expect_symbol("(")
        values = [self._value()]
        while self._peek().text == ",":
            self._next()
            if self._peek().text == ")":
                break
            values.append(self._value())
        self._expect_symbol(")")
        return tuple(values)

    def _value(self) -> Scalar:
        token = self._next()
        if token.kind == "number":
            if re.fullmatch(r"[-+]?[0-9]+", token.text) is None:
                return float(token.text)
            if len(token.text.lstrip("+-")) > _MAX_INTEGER_DIGITS:
                self._fail(token, "an integer within the 64-bit range", shown=f"{len(token.text)} digits")
            return int(token.text)
        if token.kind == "string":
            return token.text[1:-1]
        if token.is_word("true") or token.is_word("false"):
            return token.is_word("true")
        hint = "; test for a missing value with 'is null'" if token.is_word("null") else ""
        self._fail(token, "expected a value (a number, a quoted string, true or false)", hint=hint)

    def _expect_keyword(self, word: str) -> None:
        token = self._next()
        if not token.is_word(word):
            self._fail(token, f"expected {word!r}")

    def _expect_symbol(self, symbol: str) -> None:
        token = self._next()
        if token.text != symbol or token.kind != "symbol":
            self._fail(token, f"expected {symbol!r}")

    def _peek(self) -> _Token:
        return self._tokens[self._at]

    def _next(self) -> _Token:
        token = self._tokens[self._at]
        self._at = min(self._at + 1, len(self._tokens) - 1)
        return token

    def _fail(self, token: _Token, expected: str, shown: str | None = None, hint: str = "") -> NoReturn:
        found = "the end of the expression" if token.kind == "end" else shown or short_repr(token.text)
        raise UserError(f"bad filter expression at character {token.position}: {expected}, found {found}{hint}")


def _tokenize(text: str) -> list[_Token]:
    """The tokens of `text`, ending with an `end` token; `UserError` naming the first character no token matches."""
    tokens = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "space":
            continue
        if kind == "bad":
            shown = short_repr(match.group())
            raise UserError(
                f"bad filter expression at character {match.start() + 1}: unexpected {shown}; "
                "operators are = != < <= > >= in, not in, is null"
            )
        tokens.append(_Token(str(kind), match.group(), match.start() + 1))
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens
