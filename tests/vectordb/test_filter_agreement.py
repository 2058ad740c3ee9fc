"""Random filters over random metadata: FAISS, Qdrant's local mode and a plain-Python oracle pass the same items.

A seeded generator (no hypothesis) draws datasets whose columns hold the values where backends
part ways: integers near 2**53 and 2**63, -0.0 beside 0.0, floats no integer type holds, Unicode
and empty strings, nulls, and names with `.`, `[]`, spaces, `:`, `$` or other scripts; and filters
of every operator, nested with and / or / not, whose numbers are drawn near those values (the
same integer as a float, a fraction next to it, 2**53 + 1 against a float column). Every filter
is checked in both spellings (JSON and where-expression parse to equal filters), then the ids that
pass are compared across the three evaluations. NaN and infinity are refused as filter values and
as metadata, so they appear as filters that must fail to parse (counted apart).
"""

from __future__ import annotations

import math
import operator
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from retrieval.core.column_types import typed_table
from retrieval.errors import UserError
from retrieval.index import SearchIndex, clustered_unit_vectors
from retrieval.index.filter_language import Filter, parse_filter, parse_where
from retrieval.vectordb import parse_database_uri
from retrieval.vectordb.collection_index import CollectionIndex
from retrieval.vectordb.upload import export_index

ROWS, DIM = 24, 8
QUICK = (10, 40)  # datasets x filters: about 5 s on 2 shared cores

_INTS = [0, 1, -1, 2, 7, 2**53 - 1, 2**53, 2**53 + 1, 2**53 + 2, -(2**53) - 1, 2**62 + 1, 2**63 - 1, 2**63 - 2]
_INTS += [2**63 - 1025, 2**63 - 2048, -(2**63), -(2**63) + 1, 10**18 + 7]
_FLOATS = [0.0, -0.0, 0.5, 1.5, -2.5, 2.0, 2.0**53, 2.0**53 + 2, -(2.0**53), 1e300, -1e-300, 9.2233720368547758e18]
_STRINGS = ["a", "é", "日本", "a b", "", "it.s", "Ω", "x[0]", "b", "A", "ã", "a\u0303"]
_NAMES = ["v", "a.b", "x[]", "unit price", "日本", "prix_é", "$n", "k:v", "a[0]", "-x", "label", "é.ü", "a.b[]"]
_TEXT_CELLS = ["3", "+44", "007", "1٣", "nan", "-0.0", "9007199254740993", "0.5", "1e309", "", "12"]
_OPS = ["eq", "ne", "in", "nin", "lt", "lte", "gt", "gte", "is_null"]
_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "lte": operator.le, "gt": operator.gt}
_COMPARE["gte"] = operator.ge


@dataclass
class Dataset:
    table: pa.Table  # typed metadata, row i has id i
    kinds: dict[str, str]  # column -> int, float, str, bool


def random_dataset(rng: random.Random) -> Dataset:
    """Four typed columns (int, float, string, bool) under random awkward names, plus one column of CSV text cells."""
    names = rng.sample(_NAMES, 5)

    def cells(pool: list[Any]) -> list[Any]:
        return [None if rng.random() < 0.15 else rng.choice(pool) for _ in range(ROWS)]

    ints = [v for v in cells(_INTS + [rng.randint(-(2**63), 2**63 - 1) for _ in range(4)])]
    columns = {
        names[0]: pa.array(ints, pa.int64()),
        names[1]: pa.array(cells(_FLOATS + [rng.uniform(-3, 3) for _ in range(4)]), pa.float64()),
        names[2]: pa.array(cells(_STRINGS), pa.string()),
        names[3]: pa.array(cells([True, False]), pa.bool_()),
    }
    # text cells typed as `index build` types a CSV: a column of them may become int, float or str
    text = [rng.choice(_TEXT_CELLS[: rng.randint(3, len(_TEXT_CELLS))]) for _ in range(ROWS)]
    columns[names[4]] = typed_table({names[4]: text})[names[4]]
    table = pa.table(columns)
    kinds = {}
    for field in table.schema:
        kinds[field.name] = (
            "int"
            if pa.types.is_integer(field.type)
            else "float"
            if pa.types.is_floating(field.type)
            else "bool"
            if pa.types.is_boolean(field.type)
            else "str"
        )
    return Dataset(table, kinds)


def _near(rng: random.Random, values: list[Any], kind: str) -> Any:
    """A filter value of `kind`'s family drawn near the column's values, where exactness matters."""
    present = [v for v in values if v is not None]
    if kind == "bool":
        return rng.choice([True, False])
    if kind == "str":
        return rng.choice([*present, *_STRINGS, "zz", "日"])
    base = rng.choice(present or [0])
    choices = [
        base,
        int(base) if math.isfinite(base) and abs(base) < 2**63 else 0,
        float(base),
        -0.0,
        0,
        base + 1 if isinstance(base, int) else base,
        base - 1 if isinstance(base, int) else base,
        float(int(base)) + 0.5 if abs(base) < 2**53 else 0.5,
        rng.choice(_INTS),
        rng.choice(_FLOATS),
    ]
    value = rng.choice(choices)
    return value if not isinstance(value, int) or -(2**63) <= value < 2**63 else 2**63 - 1


def random_filter(rng: random.Random, data: Dataset, depth: int = 0) -> dict[str, Any]:
    """A JSON filter object: a condition, or and / or / not of smaller ones (at most 3 deep)."""
    roll = rng.random()
    if depth < 3 and roll < 0.3:
        key = rng.choice(["and", "or"])
        return {key: [random_filter(rng, data, depth + 1) for _ in range(rng.randint(1, 3))]}
    if depth < 3 and roll < 0.4:
        return {"not": random_filter(rng, data, depth + 1)}
    column = rng.choice([*data.kinds, "id"])
    kind = data.kinds.get(column, "int")
    values = data.table[column].to_pylist() if column in data.kinds else list(range(ROWS))
    ops = [op for op in _OPS if kind in ("int", "float") or op not in ("lt", "lte", "gt", "gte")]
    op = rng.choice(ops)
    if op == "is_null":
        return {column: {"is_null": rng.random() < 0.5}}
    if op in ("in", "nin"):
        return {column: {op: [_near(rng, values, kind) for _ in range(rng.randint(1, 3))]}}
    return {column: {op: _near(rng, values, kind)}}


def where_of(obj: dict[str, Any]) -> str:
    """The where-expression spelling of a filter object `random_filter` drew."""
    (key, spec), *_ = obj.items()
    if key in ("and", "or"):
        return f" {key} ".join(f"({where_of(part)})" for part in spec)
    if key == "not":
        return f"not ({where_of(spec)})"
    (op, value), *_ = spec.items()
    name = f"`{key}`"
    if op == "is_null":
        return f"{name} is {'' if value else 'not '}null"
    symbol = {"eq": "=", "ne": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
    if op in ("in", "nin"):
        return f"{name} {'in' if op == 'in' else 'not in'} ({', '.join(map(_literal, value))})"
    return f"{name} {symbol[op]} {_literal(value)}"


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f"'{value}'"
    return repr(value)


def oracle(obj: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether `row` passes: the documented semantics in plain Python (exact int/float comparison; nulls fail)."""
    passes = True
    for key, spec in obj.items():
        if key == "and":
            passes &= all(oracle(part, row) for part in spec)
        elif key == "or":
            passes &= any(oracle(part, row) for part in spec)
        elif key == "not":
            passes &= not oracle(spec, row)
        else:
            (op, value), *_ = spec.items()
            cell = row[key]
            if op == "is_null":
                passes &= (cell is None) == value
            elif cell is None:
                passes = False
            elif op in ("in", "nin"):
                passes &= any(cell == v for v in value) == (op == "in")
            else:
                passes &= _COMPARE[op](cell, value)
    return passes


def check_agreement(tmp_path: Path, seed: int, datasets: int, filters: int) -> tuple[int, int]:
    """Check `datasets` x `filters` random filters on FAISS, Qdrant local and the oracle; returns (agreed, refused)."""
    rng = random.Random(seed)
    vectors, _ = clustered_unit_vectors(ROWS, DIM, n_clusters=4, seed=seed)
    query = vectors[0]
    agreed = refused = 0
    for number in range(datasets):
        data = random_dataset(rng)
        index = SearchIndex.build(vectors, data.table, kind="flat", progress=False)
        index.save(tmp_path / f"index{number}")
        location = parse_database_uri(f"qdrant+local://{tmp_path / f'db{number}'}?collection=c")
        export_index(tmp_path / f"index{number}", location, batch_size=ROWS, progress=False)
        rows = index.metadata_for(index.ids)
        collection = CollectionIndex.open(location)
        try:
            for _ in range(filters):
                obj = random_filter(rng, data)
                where = parse_filter(obj)
                assert parse_where(where_of(obj)) == where, where_of(obj)
                expected = {row["id"] for row in rows if oracle(obj, row)}
                assert _passing(index.search(query, ROWS, filter=where)) == expected, (obj, data.table.schema)
                assert _passing(collection.search(query, ROWS, filter=where)) == expected, (obj, data.table.schema)
                agreed += 1
            for bad in (math.nan, math.inf, -math.inf):  # refused alike, never evaluated
                column = next(name for name, kind in data.kinds.items() if kind == "float")
                with pytest.raises(UserError, match="not a finite number"):
                    parse_filter({column: {"lt": bad}})
                refused += 1
        finally:
            collection.close()
    return agreed, refused


def _passing(answer: tuple[np.ndarray, np.ndarray]) -> set[int]:
    ids = answer[1][0]
    return {int(i) for i in ids[ids >= 0]}


def test_random_filters_pass_the_same_items_in_faiss_qdrant_and_the_oracle(tmp_path: Path) -> None:
    agreed, refused = check_agreement(tmp_path, seed=36, datasets=QUICK[0], filters=QUICK[1])
    assert (agreed, refused) == (QUICK[0] * QUICK[1], QUICK[0] * 3)


def test_the_generator_reaches_the_values_where_backends_part_ways() -> None:
    """The draws hold big integers, -0.0, awkward names and every operator, so agreement means something."""
    rng = random.Random(36)
    data = [random_dataset(rng) for _ in range(QUICK[0])]
    cells = [v for d in data for column in d.table.columns for v in column.to_pylist()]
    assert any(isinstance(v, int) and abs(v) > 2**53 for v in cells)
    assert any(isinstance(v, float) and v == 0 and math.copysign(1, v) < 0 for v in cells)
    names = {name for d in data for name in d.kinds}
    assert {"a.b", "unit price"} & names and any("[" in name for name in names)
    drawn = [random_filter(rng, d) for d in data for _ in range(QUICK[1])]
    assert {op for obj in drawn for op in _ops(obj)} == set(_OPS)
    assert isinstance(parse_filter(drawn[0]), Filter)


def _ops(obj: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for key, spec in obj.items():
        if key in ("and", "or"):
            found.update(*(_ops(part) for part in spec))
        elif key == "not":
            found |= _ops(spec)
        else:
            found.update(spec)
    return found
