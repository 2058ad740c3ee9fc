"""A metadata `Filter` as a Qdrant filter: the same items pass in the database as in the FAISS index.

Each condition becomes one `must` clause. Integers compare exactly (`MatchValue`/`MatchAny`, exact
for all of int64); other numbers compare with a `Range` (an `eq` is `gte = lte = value`, an `in` a
nested `should` of those); strings and booleans match exactly. A missing or null payload value
passes nothing, as a null metadata value passes nothing in FAISS. Qdrant ranges are numeric only,
so a string compared with `<` is refused here, where FAISS would compare it lexicographically.
"""

from __future__ import annotations

import pyarrow as pa

from retrieval.errors import UserError
from retrieval.index.filters import Condition, Filter
from retrieval.index.metadata import ID_COLUMN
from retrieval.vectordb._qdrant import models

__all__ = ["payload_index_kinds", "to_qdrant_filter"]

_RANGE_OPS = ("lt", "lte", "gt", "gte")


def to_qdrant_filter(where: Filter, schema: pa.Schema) -> models.Filter | None:
    """The Qdrant filter passing the points whose payload passes `where`; None when `where` has no conditions.

    Args:
        where: the filter, checked against `schema` as the FAISS index checks it.
        schema: the exported metadata's Arrow schema (`CollectionRecord.metadata_schema`).

    Raises:
        UserError: an unknown column, a value of the wrong type, or a range on strings.
    """
    where.check(schema)
    if not where.conditions:
        return None
    return models.Filter(
        must=[_clause(condition, schema.field(condition.column).type) for condition in where.conditions]
    )


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


def _clause(condition: Condition, column_type: pa.DataType) -> models.FieldCondition | models.Filter:
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
