"""A metadata `Filter` as a Qdrant filter: the same items pass in the database as in the FAISS index.

Each condition is first written in its column's type (`typed_condition`, the form FAISS evaluates
too), so both backends see the same exact numbers. An `and` becomes `must`, an `or` `should`, a
`not` `must_not`. Integers match exactly (`MatchValue`/`MatchAny`, exact for all of int64).
Qdrant's `Range` bounds are float64, so a range on an integer column with a bound beyond 2**53
is split: a `Range` at the float just inside the bound, which passes only integers the range
passes whether Qdrant compares the stored integer exactly or as a float64, or-ed with a
`MatchAny` of the few integers (at most about 3 float spacings, a few thousand near 2**63)
between that float and the bound. Floats compare with `Range`s (an `eq` is `gte = lte = value`,
an `in` a nested `should` of those); strings and booleans match exactly. A missing or null
payload value passes no comparison, as a null metadata value passes none in FAISS: `!=` and
`not in` are `must_not` of the match and of `is_empty`; `is null` is `is_empty` (missing, null
or []: an index stores no lists, so missing or null). Qdrant ranges are numeric only, as the filter
language's are.

A column is named by its JSON path, quoted unless plain ASCII (`"a.b"`), so `.`, `[]`, spaces, `:` and `$` are part of
the name, not a nested path; a name holding `"` or `\\` (or an empty name), which Qdrant's paths
cannot quote, is refused when the index is exported (`check_payload_keys`).

`id` is the point id, not a payload field: `=`, `in`, `!=` and `not in` become `has_id`, and a
range the ids that pass it among `0..next_id` (the ids the index has ever given out), listed as
`has_id` or, when more than half pass, as `must_not` of the ids that do not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import pyarrow as pa

from retrieval.errors import UserError
from retrieval.index.filter_language import Condition, Filter, Node, Not, typed_condition
from retrieval.index.metadata import ID_COLUMN
from retrieval.vectordb._qdrant import models

__all__ = ["check_payload_keys", "payload_index_kinds", "payload_key", "to_qdrant_filter"]

_RANGE_OPS = ("lt", "lte", "gt", "gte")
_EXACT_FLOAT_INTEGERS = 2**53  # every integer up to this magnitude is a float64
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")  # read as one key unquoted by Qdrant's path parser and its local mode
_Clause = models.FieldCondition | models.Filter | models.HasIdCondition | models.IsEmptyCondition
_Condition = models.Condition  # what the must / should / must_not lists of a Filter take
_PointId = models.ExtendedPointId
_NOTHING = models.HasIdCondition(has_id=[])  # no point has an id in the empty list


def to_qdrant_filter(where: Filter, schema: pa.Schema, next_id: int) -> models.Filter | None:
    """The Qdrant filter passing the points whose payload passes `where`; None when `where` has no conditions.

    Args:
        where: the filter, checked against `schema` as the FAISS index checks it.
        schema: the exported metadata's Arrow schema (`CollectionRecord.metadata_schema`).
        next_id: every exported id is below it (the index manifest's `next_id`), for ranges on `id`.

    Raises:
        UserError: an unknown column, or a value of the wrong type.
    """
    where.check(schema)
    if not where.conditions:
        return None
    clause = _node(where, schema, next_id)
    return clause if isinstance(clause, models.Filter) else models.Filter(must=[clause])


def payload_key(column: str) -> str:
    """The Qdrant JSON path of the top-level payload key `column`: the name itself when it is ASCII letters,
    digits, `_` and `-` (a path of one key for Qdrant and its local mode alike), else the name quoted.

    Raises:
        UserError: a name Qdrant cannot quote (empty, or holding `"` or a backslash).
    """
    if not column or '"' in column or "\\" in column:
        raise UserError(
            f"metadata column {column!r} cannot be named in a Qdrant filter (Qdrant's field paths cannot quote "
            '" or \\, nor name an empty key); rename the column and build the index again'
        )
    return column if _PLAIN_KEY.fullmatch(column) else f'"{column}"'


def check_payload_keys(schema: pa.Schema) -> None:
    """`UserError` naming the first metadata column a Qdrant filter could not name (`payload_key`)."""
    for name in schema.names:
        if name != ID_COLUMN:
            payload_key(name)


def payload_index_kinds(schema: pa.Schema) -> dict[str, models.PayloadSchemaType]:
    """The payload index a Qdrant server should keep for each filterable metadata column, by its quoted path."""
    kinds = {}
    for field in schema:
        if field.name == ID_COLUMN:
            continue
        arrow_type = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        key = payload_key(field.name)
        if pa.types.is_boolean(arrow_type):
            kinds[key] = models.PayloadSchemaType.BOOL
        elif pa.types.is_integer(arrow_type):
            kinds[key] = models.PayloadSchemaType.INTEGER
        elif pa.types.is_floating(arrow_type):
            kinds[key] = models.PayloadSchemaType.FLOAT
        elif pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            kinds[key] = models.PayloadSchemaType.KEYWORD
    return kinds


def _node(node: Node, schema: pa.Schema, next_id: int) -> _Clause:
    """The clause of one node (recursion as deep as the filter, which parsers bound by `MAX_DEPTH`)."""
    if isinstance(node, Not):
        return models.Filter(must_not=[_node(node.operand, schema, next_id)])
    if isinstance(node, Filter):
        clauses: list[_Condition] = [_node(child, schema, next_id) for child in node.conditions]
        return models.Filter(must=clauses) if node.combine == "and" else models.Filter(should=clauses)
    column_type = schema.field(node.column).type
    typed = typed_condition(node, column_type)
    if typed is None:
        return _NOTHING
    if typed.column == ID_COLUMN:
        return _id_clause(typed, next_id)
    key = payload_key(typed.column)
    empty = models.IsEmptyCondition(is_empty=models.PayloadField(key=key))
    if typed.op == "is_null":
        return empty if typed.value else models.Filter(must_not=[empty])
    if typed.op in ("ne", "nin"):
        positive = Condition(typed.column, "eq" if typed.op == "ne" else "in", typed.value)
        return models.Filter(must_not=[empty, _clause(key, positive, column_type)])
    return _clause(key, typed, column_type)


def _id_clause(condition: Condition, next_id: int) -> _Clause:
    """A typed condition on `id` (integer values; ranges as `lt` / `gte`) as `has_id`; ids are never null."""
    op, value = condition.op, condition.value
    if op == "is_null":
        return _NOTHING if value else models.Filter(must_not=[_NOTHING])
    if op in ("lt", "gte"):
        low, high = (0, value) if op == "lt" else (value, next_id)
        low, high = min(max(low, 0), next_id), min(max(high, 0), next_id)
        if 2 * max(high - low, 0) <= next_id:
            return _has_id(range(low, high))
        return models.Filter(must_not=[_has_id([*range(0, low), *range(high, next_id)])])
    values = value if op in ("in", "nin") else (value,)
    has_id = _has_id(sorted({v for v in values if v >= 0}))  # ids are integers >= 0
    return has_id if op in ("eq", "in") else models.Filter(must_not=[has_id])


def _has_id(ids: Iterable[int]) -> models.HasIdCondition:
    point_ids: list[_PointId] = list(ids)
    return models.HasIdCondition(has_id=point_ids)


def _clause(key: str, condition: Condition, column_type: pa.DataType) -> models.FieldCondition | models.Filter:
    """A typed comparison (`eq`, `in` or a range) on the payload field at `key`."""
    op, value = condition.op, condition.value
    integers = condition.kind == "number" and pa.types.is_integer(
        column_type.value_type if pa.types.is_dictionary(column_type) else column_type
    )
    if op in _RANGE_OPS:  # numbers only (`Condition` refuses a range on strings or booleans)
        return _integer_range(key, op, value) if integers else _range(key, **{op: value})
    values = value if op == "in" else (value,)
    if condition.kind == "number" and not integers:  # floats: a range holding the one value (-0.0 included)
        equal = [_range(key, gte=v, lte=v) for v in values]
        return equal[0] if len(equal) == 1 else models.Filter(should=list(equal))
    if len(values) == 1:
        return models.FieldCondition(key=key, match=models.MatchValue(value=values[0]))
    if condition.kind == "boolean":  # MatchAny takes strings or integers only
        return models.Filter(should=[models.FieldCondition(key=key, match=models.MatchValue(value=v)) for v in values])
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def _range(key: str, **bounds: float) -> models.FieldCondition:
    return models.FieldCondition(key=key, range=models.Range(**bounds))


def _integer_range(key: str, op: str, bound: int) -> models.FieldCondition | models.Filter:
    """`x < bound` or `x >= bound` (the typed forms) on an int64 field, exact although Qdrant's bounds are floats."""
    if abs(bound) <= _EXACT_FLOAT_INTEGERS:
        return _range(key, **{op: bound})
    nearest = float(bound)
    if op == "lt":
        inside = math.nextafter(nearest, -math.inf)  # the float just below `bound`'s, which is <= bound
        band = range(max(math.floor(inside - math.ulp(inside)), _INT64_MIN), bound)
    else:
        inside = math.nextafter(nearest, math.inf)
        band = range(bound, min(math.ceil(inside + math.ulp(inside)), _INT64_MAX) + 1)
    conservative = _range(key, **{op: inside})
    return models.Filter(should=[conservative, models.FieldCondition(key=key, match=models.MatchAny(any=list(band)))])
