"""A metadata `Filter` as a Qdrant filter: the same items pass in the database as in the FAISS index.

An `and` becomes `must`, an `or` `should`, a `not` `must_not`. Integers compare exactly
(`MatchValue`/`MatchAny`, exact for all of int64); other numbers compare with a `Range` (an `eq`
is `gte = lte = value`, an `in` a nested `should` of those); strings and booleans match exactly.
A missing or null payload value passes no comparison, as a null metadata value passes none in
FAISS: `!=` and `not in` are `must_not` of the match and of `is_empty`; `is null` is
`is_empty` (missing, null or []). Qdrant ranges are numeric only, so a string compared with
`<` is refused here, where FAISS would compare it lexicographically.

`id` is the point id, not a payload field: `=`, `in`, `!=` and `not in` become `has_id`, and a
range the ids that pass it among `0..next_id` (the ids the index has ever given out), listed as
`has_id` or, when more than half pass, as `must_not` of the ids that do not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pyarrow as pa

from retrieval.errors import UserError
from retrieval.index.filter_language import Condition, Filter, Node, Not
from retrieval.index.metadata import ID_COLUMN
from retrieval.vectordb._qdrant import models

__all__ = ["payload_index_kinds", "to_qdrant_filter"]

_RANGE_OPS = ("lt", "lte", "gt", "gte")
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
        UserError: an unknown column, a value of the wrong type, or a range on strings.
    """
    where.check(schema)
    if not where.conditions:
        return None
    clause = _node(where, schema, next_id)
    return clause if isinstance(clause, models.Filter) else models.Filter(must=[clause])


def payload_index_kinds(schema: pa.Schema) -> dict[str, models.PayloadSchemaType]:
    """The payload index a Qdrant server should keep for each filterable metadata column (`id` is the point id)."""
    kinds = {}
    for field in schema:
        if field.name == ID_COLUMN:
            continue
        arrow_type = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
        if pa.types.is_boolean(arrow_type):
            kinds[field.name] = models.PayloadSchemaType.BOOL
        elif pa.types.is_integer(arrow_type):
            kinds[field.name] = models.PayloadSchemaType.INTEGER
        elif pa.types.is_floating(arrow_type):
            kinds[field.name] = models.PayloadSchemaType.FLOAT
        elif pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
            kinds[field.name] = models.PayloadSchemaType.KEYWORD
    return kinds


def _node(node: Node, schema: pa.Schema, next_id: int) -> _Clause:
    """The clause of one node (recursion as deep as the filter, which parsers bound by `MAX_DEPTH`)."""
    if isinstance(node, Not):
        return models.Filter(must_not=[_node(node.operand, schema, next_id)])
    if isinstance(node, Filter):
        clauses: list[_Condition] = [_node(child, schema, next_id) for child in node.conditions]
        return models.Filter(must=clauses) if node.combine == "and" else models.Filter(should=clauses)
    if node.column == ID_COLUMN:
        return _id_clause(node, next_id)
    empty = models.IsEmptyCondition(is_empty=models.PayloadField(key=node.column))
    if node.op == "is_null":
        return empty if node.value else models.Filter(must_not=[empty])
    if node.op in ("ne", "nin"):
        positive = Condition(node.column, "eq" if node.op == "ne" else "in", node.value)
        return models.Filter(must_not=[empty, _clause(positive, schema.field(node.column).type)])
    return _clause(node, schema.field(node.column).type)


def _id_clause(condition: Condition, next_id: int) -> _Clause:
    """A condition on `id` as `has_id` (ids are never null)."""
    op, value = condition.op, condition.value
    if op == "is_null":
        return _NOTHING if value else models.Filter(must_not=[_NOTHING])
    if op in _RANGE_OPS:
        low, high = {
            "lt": (0, math.ceil(value)),
            "lte": (0, math.floor(value) + 1),
            "gt": (math.floor(value) + 1, next_id),
            "gte": (math.ceil(value), next_id),
        }[op]
        low, high = min(max(low, 0), next_id), min(max(high, 0), next_id)
        if 2 * max(high - low, 0) <= next_id:
            return _has_id(range(low, high))
        return models.Filter(must_not=[_has_id([*range(0, low), *range(high, next_id)])])
    values = value if op in ("in", "nin") else (value,)
    # Ids are integers >= 0: a fraction or a negative number names no point.
    named = sorted({int(v) for v in values if not isinstance(v, bool) and float(v).is_integer() and v >= 0})
    has_id = _has_id(named)
    return has_id if op in ("eq", "in") else models.Filter(must_not=[has_id])


def _has_id(ids: Iterable[int]) -> models.HasIdCondition:
    point_ids: list[_PointId] = list(ids)
    return models.HasIdCondition(has_id=point_ids)


def _clause(condition: Condition, column_type: pa.DataType) -> models.FieldCondition | models.Filter:
    """A comparison (`eq`, `in` or a range) on a payload field."""
    key, op, value = condition.column, condition.op, condition.value
    if op in _RANGE_OPS:
        if condition.kind != "number":
            raise UserError(
                f"filter on {key!r}: the Qdrant backend compares {condition.kind}s with = and in only, not {op}"
            )
        return models.FieldCondition(key=key, range=models.Range(**{op: value}))
    values = value if op == "in" else (value,)
    exact = condition.kind != "number" or (pa.types.is_integer(column_type) and _all_integers(values))
    if not exact:  # floats, or an integer column compared with fractional numbers
        equal = [models.FieldCondition(key=key, range=models.Range(gte=v, lte=v)) for v in values]
        return equal[0] if len(equal) == 1 else models.Filter(should=list(equal))
    if len(values) == 1:
        return models.FieldCondition(key=key, match=models.MatchValue(value=values[0]))
    if condition.kind == "boolean":  # MatchAny takes strings or integers only
        return models.Filter(should=[models.FieldCondition(key=key, match=models.MatchValue(value=v)) for v in values])
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def _all_integers(values: tuple[object, ...]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)
