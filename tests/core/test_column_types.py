"""Metadata column types: inferred per column from text cells, or declared; empty cells are null."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from retrieval.core.column_types import infer_column_type, parse_column_types, typed_table
from retrieval.errors import UserError
from retrieval.index.metadata import Metadata


@pytest.mark.parametrize(
    ("cells", "kind"),
    [
        (["3", "-5", "", "0"], "int"),
        (["+7", "3"], "str"),  # an integer would lose the + (phone numbers: +44...)
        (["-0", "3"], "str"),  # -0 is not the text of 0: the number would lose its sign
        (["9223372036854775807", "-9223372036854775808"], "int"),
        (["9223372036854775808"], "str"),  # past int64: float64 would round it
        (["1234567890123456789012345", "1234567890123456789012346"], "str"),  # 25-digit codes stay distinct
        (["9007199254740993", "0.5"], "str"),  # 2**53 + 1 beside a float: float64 would round it
        (["9007199254740992", "0.5"], "float"),  # 2**53: held exactly
        (["1.5e3", "-2.5"], "str"),  # 1.5e3 is the number 1500, whose text is 1500
        (["-2.5", "1e-05", "1.5e-300"], "float"),  # each exactly the shortest text of its float
        (["+1.5"], "str"),
        (["1٣"], "str"),  # non-ASCII digits are text
        (["١٢"], "str"),
        (["2.5", "3", "0.5", ""], "float"),
        (["2.5", "3", "1e3", ""], "str"),  # 1e3 reads back as 1000
        ([".5"], "str"),  # reads back as 0.5
        (["1.0"], "str"),  # the number 1, whose text is 1
        (["007", "12"], "str"),  # leading zeros are part of the value (SKUs, zip codes)
        (["0.07", "0"], "float"),
        (["1.1", "1.10"], "str"),  # issue 47.4: both were 1.1, so `ver = 1.1` matched the 1.10 row
        (["9007199254740993.0"], "str"),  # was 2**53
        (["1e-400"], "str"),  # was 0.0
        (["0.1000000000000000000001"], "str"),  # was 0.1
        (["nan", "1"], "str"),
        (["inf"], "str"),
        (["1e999"], "str"),  # not finite
        (["3", "cat"], "str"),
        (["", ""], "str"),
        ([], "str"),
        (["1_000"], "str"),
    ],
)
def test_inference_follows_the_documented_rule(cells: list[str], kind: str) -> None:
    assert infer_column_type(cells) == kind


def test_typed_table_types_each_column_and_makes_empty_cells_null() -> None:
    table = typed_table(
        {
            "path": ["1", "2", "3"],
            "label": ["3", "5", ""],
            "price": ["10", "", "2.5"],
            "shop": ["a", "", "b"],
            "sku": ["0012", "13", "14"],
        },
        {"sku": "int"},
    )
    assert table.schema == pa.schema(
        [
            ("path", pa.string()),
            ("label", pa.int64()),
            ("price", pa.float64()),
            ("shop", pa.string()),
            ("sku", pa.int64()),
        ]
    )
    assert table.to_pydict() == {
        "path": ["1", "2", "3"],  # paths are never numbers
        "label": [3, 5, None],
        "price": [10.0, None, 2.5],
        "shop": ["a", None, "b"],
        "sku": [12, 13, 14],  # declared int: leading zeros allowed
    }
    assert typed_table({"zip": ["02139", "10001"]}, {"zip": "str"})["zip"].to_pylist() == ["02139", "10001"]
    assert typed_table({"n": ["1", "2"]}, {"n": "float"})["n"].type == pa.float64()


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ("price", r"entry 'price' must be NAME=TYPE with TYPE one of int, float, str"),
        ("price=money", r"entry 'price=money' must be NAME=TYPE"),
        ("price=int,price=str", r"names 'price' twice"),
        ("path=int", r"'path' holds file paths and is always str"),
    ],
)
def test_bad_declarations_are_user_errors(declared: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        parse_column_types(declared)


def test_declarations_parse_and_cells_that_do_not_fit_are_named() -> None:
    assert parse_column_types(" price=float, sku=str ,") == {"price": "float", "sku": "str"}
    assert parse_column_types(None) == {}
    with pytest.raises(UserError, match=r"column 'price' of a.csv is declared int, but row 2 holds '2.5'"):
        typed_table({"price": ["1", "2.5"]}, {"price": "int"}, "a.csv")
    with pytest.raises(UserError, match=r"--column-types names 'prize', not a column of a.csv; its columns: price"):
        typed_table({"price": ["1"]}, {"prize": "int"}, "a.csv")


def test_rows_added_to_an_index_take_the_index_types() -> None:
    """An index built before typing stores labels as strings: added rows keep that, so old filters still work."""
    old = Metadata.from_rows(np.arange(2), pa.table({"label": ["3", "4"], "price": pa.array([1.5, 2.0])}))
    added = Metadata.from_rows(np.arange(2, 4), typed_table({"label": ["5", ""], "price": ["7", "8"]}))
    merged = old.appended(added)
    assert merged.table.schema.field("label").type == pa.string()
    assert merged.table["label"].to_pylist() == ["3", "4", "5", None]
    assert merged.table["price"].to_pylist() == [1.5, 2.0, 7.0, 8.0]
    bad = Metadata.from_rows(np.arange(4, 5), typed_table({"price": ["cheap"]}))
    with pytest.raises(UserError, match=r"'price' goes into the index's float column, but row 1 holds 'cheap'"):
        old.appended(bad)


@pytest.mark.parametrize(
    ("cells", "why"),
    [
        (["nan"], "not a decimal number"),
        (["1e309"], "not finite"),
        (["9007199254740993", "0.5"], "float64 would store 9007199254740992.0"),
    ],
)
def test_added_text_cells_a_float_column_cannot_hold_are_refused_not_stored(cells: list[str], why: str) -> None:
    """`index build` keeps such cells as text; `add` must not store NaN, inf or a rounded integer instead."""
    index = Metadata.from_rows(np.arange(2), typed_table({"price": ["1.5", "2"]}))
    added = Metadata.from_rows(np.arange(2, 2 + len(cells)), typed_table({"price": cells}))
    with pytest.raises(UserError, match=why) as refused:
        index.appended(added)
    assert "--column-types price=str" in str(refused.value) and "build the index again" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_an_added_label_of_another_type_names_the_fix_that_can_help() -> None:
    index = Metadata.from_rows(np.arange(2), typed_table({"label": ["3", "4"]}))
    with pytest.raises(UserError, match=r"holds 'cat' \(not an integer in ASCII digits\); fix the values; an index"):
        index.appended(Metadata.from_rows(np.arange(2, 3), typed_table({"label": ["cat"]})))


def test_metadata_refuses_nan_and_infinity_which_json_cannot_write() -> None:
    with pytest.raises(UserError, match=r"metadata column 'price' holds inf \(row 2\).*use null"):
        Metadata.from_rows(np.arange(3), {"price": [1.0, float("inf"), None]})
    assert Metadata.from_rows(np.arange(2), {"price": [1.0, None]}).table["price"].null_count == 1


def test_an_id_column_is_refused_with_the_rename_that_fixes_it() -> None:
    with pytest.raises(UserError, match=r"named 'id': the index assigns ids; rename it \(e.g. to item_id\)"):
        Metadata.from_rows(np.arange(1), {"id": [7]})


@pytest.mark.parametrize("name", ["rank", "score"])
def test_a_column_a_search_result_would_overwrite_is_refused(name: str) -> None:
    """`index query --json` gives each result's rank and score beside the row's columns: a `score` column of the
    user's was silently replaced by the search score in every result."""
    with pytest.raises(UserError, match=rf"a column named '{name}': .*; rename it \(e.g. to item_{name}\)"):
        Metadata.from_rows(np.arange(1), {name: [0.5]})


def test_declared_columns_read_ascii_digits_only() -> None:
    for kind, cell in (("int", "1٣"), ("float", "١.5")):
        with pytest.raises(UserError, match="ASCII digits"):
            typed_table({"n": [cell]}, {"n": kind})
    assert typed_table({"n": ["+7", "007"]}, {"n": "int"})["n"].to_pylist() == [7, 7]


@pytest.mark.parametrize(
    ("cell", "stored"),
    [("9007199254740995.0", "9007199254740996.0"), ("1e-999", "0.0"), ("0.1000000000000000000001", "0.1")],
)
def test_a_declared_or_stored_float_refuses_a_cell_it_would_round(cell: str, stored: str) -> None:
    """Issue 47.5: `index add` refused 9007199254740995 but stored 9007199254740995.0 as ...996.0 and 1e-999 as 0.0."""
    for declared, kept in (({"x": "float"}, None), (None, {"x": "float"})):
        with pytest.raises(UserError) as refused:
            typed_table({"x": ["1.5", cell]}, declared, "a.csv", kept)
        message = str(refused.value)
        assert "a.csv" in message and "'x'" in message
        assert f"row 2 holds '{cell}' (float64 would store {stored}, another number)" in message
    assert typed_table({"x": ["1.10", "1e3", "+2"]}, {"x": "float"})["x"].to_pylist() == [1.1, 1000.0, 2.0]


def test_index_add_reads_an_index_string_column_as_written(tmp_path) -> None:
    """Issue 47.6: new cells were inferred as floats and cast back, so `1.10` was stored as "1.1", `1e3` as "1000"."""
    from retrieval.core.column_types import column_types_of
    from retrieval.inference.sources import read_source

    index = Metadata.from_rows(np.arange(2), typed_table({"code": ["A1", "B2"], "n": ["1", "2"]}))
    (tmp_path / "a.png").write_bytes(b"")
    (tmp_path / "new.csv").write_text("path,code,n\na.png,1.10,3\na.png,2.50,4\na.png,1e3,5\n")
    stored = column_types_of(index.table.schema)
    assert stored == {"id": "int", "code": "str", "n": "int"}
    added = read_source(tmp_path / "new.csv", None, "all", None, stored).rows(np.arange(3))
    merged = index.appended(Metadata.from_rows(np.arange(2, 5), added))
    assert merged.table["code"].to_pylist() == ["A1", "B2", "1.10", "2.50", "1e3"]
    with pytest.raises(UserError, match=r"declares 'code' float, but the index stores it as str"):
        read_source(tmp_path / "new.csv", None, "all", {"code": "float"}, stored)


def test_an_integer_that_float64_holds_exactly_reads_into_an_inferred_float_column() -> None:
    """Found by the round-trip property: -2**63 beside 0.5 was inferred float, then refused by the float reading
    (its shortest text, -9.223372036854776e+18, is another decimal; its binary value is exactly -2**63)."""
    table = typed_table({"n": ["-9223372036854775808", "0.5"]})
    assert table["n"].to_pylist() == [-(2.0**63), 0.5]


def test_metadata_cells_keep_their_spaces(tmp_path) -> None:
    """Found by the round-trip property: every CSV cell was stripped, so ' 1' came back from a search as 1."""
    from retrieval.inference.sources import read_source

    (tmp_path / "a.png").touch()
    (tmp_path / "a.csv").write_text("path,label,price\n a.png, 3 , 1\na.png,4,2 \n")
    rows = read_source(tmp_path / "a.csv", None).rows(np.arange(2)).to_pydict()
    assert rows["price"] == [" 1", "2 "] and rows["label"] == [3, 4]  # the format's own columns are trimmed
