"""Filters on metadata columns: equality, membership and ranges, combined with AND.

One `Filter` object, two spellings that parse to equal objects:

- a where-expression (CLI `--where`): `label in (3, 5) and price < 50 and shop = 'a'`.
  Operators `=` `==` `in` `<` `<=` `>` `>=`; `and` only (no `or`, no `not`); `and`, `in`,
  `true`, `false` in any case; values are integers, floats, quoted strings (`'..'` or `".."`,
  no escapes) and `true`/`false`. A column name that is not a plain identifier goes in
  backticks: `` `unit price` < 5 ``. An empty expression passes everything.
- a JSON object (`/search` `filter`, or a JSON file given to `--where`):
  `{"label": {"in": [3, 5]}, "price": {"lt": 50}, "shop": "a"}`. A bare value means `eq`;
  several operators on one column (`{"price": {"gte": 10, "lt": 50}}`) are several conditions.

Columns and types are checked against the metadata when the filter is applied (`Filter.check`):
numbers compare with numeric columns, strings with string columns, booleans with boolean columns.
A row whose value is null never passes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from retrieval.errors import UserError

__all__ = ["Condition", "Filter", "Op", "load_filter", "parse_filter", "parse_where"]

Op = Literal["eq", "in", "lt", "lte", "gt", "gte"]
Scalar = str | int | float | bool

_OPS: tuple[str, ...] = get_args(Op)
_SYMBOLS: dict[str, Op] = {"=": "eq", "==": "eq", "<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}
_COMPARE = {"eq": pc.equal, "lt": pc.less, "lte": pc.less_equal, "gt": pc.greater, "gte": pc.greater_equal}


@dataclass(frozen=True)
class Condition:
    """`column op value`: one test on one metadata column.

    Attributes:
        column: the metadata column's name.
        op: `eq`, `in`, `lt`, `lte`, `gt` or `gte`.
        value: a scalar (str, int, float or bool); a non-empty tuple of scalars for `in`.
    """

    column: str
    op: Op
    value: Any

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise UserError(f"filter on {self.column!r}: unknown operator {self.op!r}; use one of {', '.join(_OPS)}")
        if self.op == "in":
            if not isinstance(self.value, tuple) or not self.value:
                raise UserError(f"filter on {self.column!r}: 'in' takes a non-empty list of values")
            kinds = {_kind_of_value(self.column, v) for v in self.value}
            if len(kinds) > 1:
                raise UserError(f"filter on {self.column!r}: 'in' values mix {' and '.join(sorted(kinds))}")
        else:
            _kind_of_value(self.column, self.value)

    @property
    def kind(self) -> str:
        """`number`, `string` or `boolean`: the type of column this condition can test."""
        first = self.value[0] if self.op == "in" else self.value
        return _kind_of_value(self.column, first)

    def mask(self, column: pa.ChunkedArray) -> np.ndarray:
        """`(N,)` bool: which values of `column` pass (nulls never do)."""
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if self.op == "in":
            values = pa.array(list(self.value))
            if values.type != column.type:
                common = pa.float64() if self.kind == "number" else column.type
                column, values = column.cast(common), values.cast(common)
            passed = pc.is_in(column, value_set=values)
        else:
            passed = _COMPARE[self.op](column, pa.scalar(self.value))
        return np.asarray(pc.fill_null(passed, False).to_numpy(zero_copy_only=False), dtype=bool)


@dataclass(frozen=True)
class Filter:
    """Conditions combined with AND; no conditions: every row passes.

    Attributes:
        conditions: the conditions, in the order they were written.
    """

    conditions: tuple[Condition, ...] = ()

    def check(self, schema: pa.Schema) -> None:
        """Raise `UserError` if a condition names a column `schema` lacks or compares it with the wrong type."""
        for condition in self.conditions:
            if condition.column not in schema.names:
                columns = ", ".join(schema.names)
                raise UserError(f"filter column {condition.column!r} is not in the metadata; columns: {columns}")
            column_kind = _kind_of_type(schema.field(condition.column).type)
            if column_kind is None:
                raise UserError(
                    f"filter column {condition.column!r} has type {schema.field(condition.column).type}; "
                    "filters compare numbers, strings and booleans only"
                )
            if column_kind != condition.kind:
                raise UserError(
                    f"filter on {condition.column!r}: the column holds {column_kind}s, "
                    f"the filter compares it with a {condition.kind} ({condition.value!r})"
                )

    def mask(self, table: pa.Table) -> np.ndarray:
        """`(num_rows,)` bool: the rows of `table` that pass every condition (vectorized, pyarrow.compute)."""
        self.check(table.schema)
        passed = np.ones(table.num_rows, dtype=bool)
        for condition in self.conditions:
            passed &= condition.mask(table[condition.column])
        return passed


def parse_filter(obj: Mapping[str, Any]) -> Filter:
    """The filter of a JSON object: `{"label": {"in": [3, 5]}, "price": {"lt": 50}, "shop": "a"}`.

    Raises:
        UserError: not an object, an unknown operator, or a value of the wrong shape.
    """
    if not isinstance(obj, Mapping):
        raise UserError(f"a filter must be a JSON object of column: condition, got {type(obj).__name__}")
    conditions = []
    for column, spec in obj.items():
        if not isinstance(spec, Mapping):
            if isinstance(spec, (list, tuple)):
                raise UserError(f'filter on {column!r}: a list needs an operator, e.g. {{"{column}": {{"in": [...]}}}}')
            conditions.append(Condition(column, "eq", spec))
            continue
        if not spec:
            raise UserError(f"filter on {column!r}: empty condition; give an operator among {', '.join(_OPS)}")
        for op, value in spec.items():
            if op not in _OPS:
                raise UserError(f"filter on {column!r}: unknown operator {op!r}; use one of {', '.join(_OPS)}")
            if op == "in":
                if not isinstance(value, (list, tuple)):
                    raise UserError(f"filter on {column!r}: 'in' takes a list of values, got {value!r}")
                value = tuple(value)
            conditions.append(Condition(column, op, value))
    return Filter(tuple(conditions))


def parse_where(text: str) -> Filter:
    """The filter of a where-expression: `label in (3, 5) and price < 50 and shop = 'a'`.

    Raises:
        UserError: a syntax error, naming the offending token and its position.
    """
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
    return parse_filter(obj)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a long expression is not a valid file name on every system
        return False


def _kind_of_value(column: str, value: Any) -> str:
    """`boolean`, `number` or `string`; `UserError` for anything else (None, lists, NaN, ...)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"filter on {column!r}: {value!r} is not a finite number")
        return "number"
    if isinstance(value, str):
        return "string"
    raise UserError(f"filter on {column!r}: values are numbers, strings or true/false, got {value!r}")


def _kind_of_type(arrow_type: pa.DataType) -> str | None:
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return "number"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    return None


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.]))
    | (?P<string>'[^']*'|"[^"]*")
    | (?P<name>[A-Za-z_][\w.]*|`[^`]+`)
    | (?P<symbol><=|>=|==|=|<|>|\(|\)|,)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Token:
    kind: str  # number, string, name, symbol, end
    text: str
    position: int  # 1-based character position, for messages


class _WhereParser:
    """Recursive descent over `condition (AND condition)*`, one token of look-ahead."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _tokenize(text)
        self._at = 0

    def parse(self) -> Filter:
        if self._peek().kind == "end":
            return Filter(())
        conditions = [self._condition()]
        while self._peek().kind != "end":
            self._expect_keyword("and")
            conditions.append(self._condition())
        return Filter(tuple(conditions))

    def _condition(self) -> Condition:
        token = self._next()
        if token.kind != "name" or _is_keyword(token):
            self._fail(token, "expected a column name")
        column = token.text[1:-1] if token.text.startswith("`") else token.text
        operator = self._next()
        if operator.kind == "symbol" and operator.text in _SYMBOLS:
            return Condition(column, _SYMBOLS[operator.text], self._value())
        if operator.kind == "name" and operator.text.lower() == "in":
            return Condition(column, "in", self._value_list())
        self._fail(operator, f"expected an operator (= == < <= > >= in) after {token.text!r}")

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
            number = float(token.text)
            is_integer = re.fullmatch(r"[-+]?\d+", token.text) is not None
            return int(token.text) if is_integer else number
        if token.kind == "string":
            return token.text[1:-1]
        if token.kind == "name" and token.text.lower() in ("true", "false"):
            return token.text.lower() == "true"
        self._fail(token, "expected a value (a number, a quoted string, true or false)")

    def _expect_keyword(self, word: str) -> None:
        token = self._next()
        if token.kind != "name" or token.text.lower() != word:
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

    def _fail(self, token: _Token, expected: str) -> NoReturn:
        found = "the end of the expression" if token.kind == "end" else repr(token.text)
        hint = "; only 'and' combines conditions" if token.text.lower() in ("or", "not") else ""
        raise UserError(f"bad filter expression at character {token.position}: {expected}, found {found}{hint}")


def _is_keyword(token: _Token) -> bool:
    return token.text.lower() in ("and", "in", "true", "false")


def _tokenize(text: str) -> list[_Token]:
    """The tokens of `text`, ending with an `end` token; `UserError` naming the first character no token matches."""
    tokens = []
    position = 0
    while text[position:].strip():
        match = _TOKEN.match(text, position)
        if match is None or match.lastgroup is None:
            start = len(text) - len(text[position:].lstrip())
            bad = re.match(r"\S+", text[start:])
            shown = bad.group(0) if bad else text[start:]
            hint = "; there is no '!=', only = == < <= > >= in" if shown.startswith("!") else ""
            raise UserError(f"bad filter expression at character {start + 1}: unexpected {shown!r}{hint}")
        tokens.append(_Token(match.lastgroup, match.group(match.lastgroup), match.start(match.lastgroup) + 1))
        position = match.end()
    tokens.append(_Token("end", "", len(text) + 1))
    return tokens
