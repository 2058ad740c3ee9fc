"""The filter language: both spellings parse to equal filters, masks match a Python oracle, errors say where."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from retrieval.errors import UserError
from retrieval.index.filters import Condition, Filter, load_filter, parse_filter, parse_where

ROWS: list[dict[str, Any]] = [
    {"id": 0, "label": 3, "price": 10.0, "shop": "a", "ok": True},
    {"id": 1, "label": 4, "price": 60.0, "shop": "b", "ok": False},
    {"id": 2, "label": 5, "price": 20.0, "shop": "a", "ok": True},
    {"id": 3, "label": 3, "price": 55.0, "shop": "a", "ok": True},
    {"id": 4, "label": None, "price": 1.0, "shop": "b", "ok": None},
    {"id": 5, "label": 5, "price": None, "shop": "it's", "ok": False},
]
TABLE = pa.Table.from_pylist(ROWS)

SAME = [
    ("label in (3,5) and price < 50", {"label": {"in": [3, 5]}, "price": {"lt": 50}}),
    ("shop = 'a'", {"shop": "a"}),
    ('shop == "a"', {"shop": {"eq": "a"}}),
    ("price >= 10 and price <= 55.5", {"price": {"gte": 10, "lte": 55.5}}),
    ("price > -1e1", {"price": {"gt": -10.0}}),
    ("ok = TRUE And label IN (3, 4,)", {"ok": True, "label": {"in": [3, 4]}}),
    ("`unit price` < 5", {"unit price": {"lt": 5}}),
    ('shop = "it\'s"', {"shop": "it's"}),
    ("", {}),
]


@pytest.mark.parametrize(("where", "obj"), SAME)
def test_where_and_json_forms_give_equal_filters(where: str, obj: dict[str, Any]) -> None:
    assert parse_where(where) == parse_filter(obj)


def test_parsed_conditions_have_the_documented_shape() -> None:
    assert parse_where("label in (3, 5) and price < 50 and name = 'shoe'") == Filter(
        (Condition("label", "in", (3, 5)), Condition("price", "lt", 50), Condition("name", "eq", "shoe"))
    )
    value = parse_where("a = 2 and b = 2.0 and c = false").conditions
    assert [type(c.value) for c in value] == [int, float, bool]


def _oracle(test: Any) -> np.ndarray:
    return np.array([test(row) for row in ROWS], dtype=bool)


def _lt(row: dict[str, Any], column: str, bound: float) -> bool:
    return row[column] is not None and row[column] < bound


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("label in (3, 5)", lambda r: r["label"] in (3, 5)),
        ("label in (3.0, 5.5)", lambda r: r["label"] == 3),
        ("price < 50", lambda r: _lt(r, "price", 50)),
        ("label in (3,5) and price < 50", lambda r: r["label"] in (3, 5) and _lt(r, "price", 50)),
        ("shop = 'a'", lambda r: r["shop"] == "a"),
        ("shop in ('a', 'z')", lambda r: r["shop"] in ("a", "z")),
        ("shop >= 'b'", lambda r: r["shop"] >= "b"),
        ("ok = true", lambda r: r["ok"] is True),
        ("price >= 20 and price <= 55", lambda r: r["price"] is not None and 20 <= r["price"] <= 55),
        ("id > 2", lambda r: r["id"] > 2),
        ("", lambda r: True),
    ],
)
def test_masks_match_a_python_oracle_and_nulls_never_pass(where: str, expected: Any) -> None:
    np.testing.assert_array_equal(parse_where(where).mask(TABLE), _oracle(expected))


def test_masks_work_on_chunked_and_dictionary_columns() -> None:
    chunked = pa.concat_tables([TABLE.slice(0, 2), TABLE.slice(2)])
    encoded = TABLE.set_column(3, "shop", TABLE["shop"].dictionary_encode())
    expected = _oracle(lambda r: r["shop"] == "a" and r["label"] == 3)
    for table in (chunked, encoded):
        np.testing.assert_array_equal(parse_where("shop = 'a' and label in (3)").mask(table), expected)
        np.testing.assert_array_equal(parse_where("shop in ('a', 'z') and label = 3").mask(table), expected)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("label in (3,5) or price < 50", r"character 16: expected 'and', found 'or'; only 'and'"),
        ("label != 3", r"character 7: unexpected '!='"),
        ("label in 3", r"character 10: expected '\(', found '3'"),
        ("label <", r"character 8: expected a value .*found the end of the expression"),
        ("3 = label", r"character 1: expected a column name, found '3'"),
        ("label = 'x", r"character 9: unexpected \"'x\""),
        ("label in ()", r"character 11: expected a value"),
        ("label = 3 and", r"character 14: expected a column name"),
        ("label = null", r"character 9: expected a value .*found 'null'"),
        ("label ~ 3", r"character 7: unexpected '~'"),
        ("label 3", r"character 7: expected an operator"),
        ("label in (1, 'a')", r"'in' values mix number and string"),
    ],
)
def test_syntax_errors_name_the_token_and_where_it_is(where: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_where(where)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"label": {"like": 3}}, r"unknown operator 'like'; use one of eq, in, lt, lte, gt, gte"),
        ({"label": [3, 5]}, r"a list needs an operator"),
        ({"label": {"in": 3}}, r"'in' takes a list"),
        ({"label": {"in": []}}, r"non-empty list"),
        ({"label": {}}, r"empty condition"),
        ({"label": None}, r"values are numbers, strings or true/false, got None"),
        ({"label": {"lt": [1]}}, r"got \[1\]"),
        ({"price": {"lt": float("nan")}}, r"not a finite number"),
        ([1, 2], r"must be a JSON object"),
    ],
)
def test_json_errors_say_what_is_wrong(obj: Any, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_filter(obj)


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("colour = 'red'", r"filter column 'colour' is not in the metadata; columns: id, label, price, shop, ok"),
        ("label = 'x'", r"the column holds numbers, the filter compares it with a string \('x'\)"),
        ("shop < 3", r"the column holds strings, the filter compares it with a number"),
        ("ok = 1", r"the column holds booleans"),
    ],
)
def test_unknown_columns_and_wrong_types_are_user_errors(where: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_where(where).mask(TABLE)


def test_columns_of_other_types_are_refused() -> None:
    table = pa.table({"tags": pa.array([["a"], ["b"]])})
    with pytest.raises(UserError, match=r"'tags' has type list<item: string>; filters compare numbers"):
        parse_where("tags = 'a'").mask(table)


def test_load_filter_reads_a_json_file_or_an_expression(tmp_path: Path) -> None:
    path = tmp_path / "filter.json"
    path.write_text(json.dumps({"label": {"in": [3, 5]}, "price": {"lt": 50}}))
    assert load_filter(str(path)) == load_filter("label in (3, 5) and price < 50")
    with pytest.raises(UserError, match=r"cannot read filter file .*missing.json"):
        load_filter(str(tmp_path / "missing.json"))
    path.write_text("{label: 3}")
    with pytest.raises(UserError, match=r"is not valid JSON"):
        load_filter(str(path))
